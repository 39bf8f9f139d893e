"""numpy is loaded only where vectors are used (``memory.embeddings``), never at Django's
start-up: every web process, worker and command would otherwise pay for it. Checked in a
fresh interpreter, on ``sys.modules`` — never on a timing."""

import subprocess
import sys
import textwrap

from tests.integration.processes import ROOT, process_env

CODE = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")
import django
django.setup()
import chat_platform.urls, chat_platform.asgi  # what a web server loads: every app's views
import memory.embeddings, memory.queries  # the search that may rank by meaning
assert "numpy" not in sys.modules, "numpy imported at start-up"
from memory.embeddings import vector_array, vector_bytes
stored = vector_bytes([3.0, 4.0])
assert "numpy" in sys.modules
print(stored.hex(), [round(float(x), 3) for x in vector_array(stored)])
"""


def test_django_start_up_never_imports_numpy():
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", textwrap.dedent(CODE)],
        cwd=ROOT,
        env=process_env(DATABASE_URL="sqlite:///:memory:", DEBUG="true", REDIS_URL=None),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # vectors still work once asked for: unit length, float32 little-endian
    assert done.stdout.strip() == "9a99193fcdcc4c3f [0.6, 0.8]"
