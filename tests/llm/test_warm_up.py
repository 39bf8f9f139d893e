"""The gateway is warmed when a web server or a worker starts (never by commands or tests).

Each check runs in a fresh interpreter, where litellm is not imported yet, and asserts on
``sys.modules``, on litellm knowing the ``builtin`` provider and on the start-up objects being
frozen for the garbage collector — never on a timing.
"""

import subprocess
import sys
import textwrap

import pytest

from chat_platform.warmup import is_web_server
from tests.integration.processes import ROOT, process_env

PRELUDE = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")
"""
CHECK_WARM = """
assert "litellm" in sys.modules, "litellm was not imported"
from chat_platform.llm.gateway import lazy_litellm
assert lazy_litellm._module is not None
import litellm
assert any(p["provider"] == "builtin" for p in litellm.custom_provider_map)
# ... and then the start-up objects frozen (the garbage collector's full passes skip them).
import gc
assert gc.get_freeze_count() > 100_000, gc.get_freeze_count()
print("WARM")
"""


def run(code: str, *, then: str = "", **env: str | None) -> subprocess.CompletedProcess:
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code) + then],
        cwd=ROOT,
        env=process_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


# A worker's first turn does not load the token encoding either (the web's warm-up did already).
CHECK_TOKENS = """
import tiktoken.registry
assert "cl100k_base" in tiktoken.registry.ENCODINGS, "the token encoding was not loaded"
print("TOKENS")
"""


def test_celery_worker_ready_signal_warms_the_gateway():
    done = run(
        """
        from chat_platform.celery_app import app
        from celery.signals import worker_ready
        assert "litellm" not in sys.modules
        import threading
        worker_ready.send(sender=None)
        for thread in threading.enumerate():
            if thread.name == "gateway-warm-up":
                thread.join(60)
        """,
        then=CHECK_WARM + CHECK_TOKENS,
    )
    assert done.stdout.split()[-2:] == ["WARM", "TOKENS"]


def test_prefork_child_init_signal_warms_the_gateway():
    done = run(
        """
        from chat_platform.celery_app import app
        from celery.signals import worker_process_init
        import threading
        worker_process_init.send(sender=None)
        for thread in threading.enumerate():
            if thread.name == "gateway-warm-up":
                thread.join(60)
        """,
        then=CHECK_WARM + CHECK_TOKENS,
    )
    assert done.stdout.split()[-2:] == ["WARM", "TOKENS"]


def test_embedded_web_server_warms_from_app_ready():
    # What `python -m uvicorn chat_platform.asgi:application` looks like to AppConfig.ready().
    done = run(
        """
        import django, threading
        sys.argv = [os.path.join(os.path.dirname(__import__("uvicorn").__file__), "__main__.py")]
        django.setup()
        warmers = [t for t in threading.enumerate() if t.name == "gateway-warm-up"]
        assert len(warmers) == 1, warmers
        # embedded mode has no Celery beat: the server runs the watchdog itself
        assert [t.name for t in threading.enumerate()].count("embedded-beat") == 1
        warmers[0].join(60)
        """,
        then=CHECK_WARM,
        REDIS_URL=None,
        DATABASE_URL="sqlite:///:memory:",
        DEBUG="true",
    )
    assert done.stdout.strip().endswith("WARM")


def test_real_mode_web_server_warms_from_app_ready_without_the_embedded_beat():
    # A real-mode web server runs no turns, but every send's fit check reads the model map.
    done = run(
        """
        import django, threading
        sys.argv = ["/venv/bin/uvicorn", "chat_platform.asgi:application"]
        django.setup()
        warmers = [t for t in threading.enumerate() if t.name == "gateway-warm-up"]
        assert len(warmers) == 1, warmers
        assert not [t for t in threading.enumerate() if t.name == "embedded-beat"]
        warmers[0].join(60)
        # ... and what its first turn would pay once: the task modules (with Django's system
        # checks), the URLconf's views, the default token encoding.
        from chat_platform.celery_app import app
        assert "bots.tasks.turn_run" in app.tasks
        assert "bots.api.views" in sys.modules
        from chat_platform.llm import tokens
        assert tokens._encoding.cache_info().currsize == 1
        """,
        then=CHECK_WARM,
        REDIS_URL="redis://127.0.0.1:6379/7",
        DATABASE_URL="sqlite:///:memory:",
        DEBUG="true",
    )
    assert done.stdout.strip().endswith("WARM")


@pytest.mark.parametrize(
    ("redis_url", "argv"),
    [
        (None, ["manage.py", "migrate"]),  # embedded, but a command
        (None, ["/venv/bin/pytest"]),  # embedded, but tests
        ("redis://127.0.0.1:6379/7", ["manage.py", "migrate"]),  # a real-mode command
        ("redis://127.0.0.1:6379/7", ["/venv/bin/celery", "-A", "chat_platform", "beat"]),
    ],
)
def test_commands_and_tests_never_warm(redis_url, argv):
    done = run(
        f"""
        import django, threading
        sys.argv = {argv!r}
        django.setup()
        assert not [t for t in threading.enumerate() if t.name == "gateway-warm-up"]
        assert not [t for t in threading.enumerate() if t.name == "embedded-beat"]
        assert "litellm" not in sys.modules
        # nor the MCP SDK (1.3 s): only a tool round or a listing imports it
        assert "mcp" not in sys.modules
        # nor daphne (its server and Twisted's reactor): only `manage.py runserver` installs it
        assert "daphne.server" not in sys.modules
        print("COLD")
        """,
        REDIS_URL=redis_url,
        DATABASE_URL="sqlite:///:memory:",
        DEBUG="true",
    )
    assert done.stdout.strip().endswith("COLD")


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["/venv/bin/uvicorn", "chat_platform.asgi:application"], {}, True),
        (["/venv/lib/python3.11/site-packages/uvicorn/__main__.py"], {}, True),
        (["/venv/bin/daphne", "chat_platform.asgi:application"], {}, True),
        (["manage.py", "runserver"], {"RUN_MAIN": "true"}, True),
        (["manage.py", "runserver"], {}, False),  # the autoreloader's watcher
        (["manage.py", "runserver", "--noreload"], {}, True),
        (["manage.py", "migrate"], {}, False),
        (["manage.py", "seed_demo"], {}, False),
        (["/venv/bin/celery", "-A", "chat_platform", "worker"], {}, False),
        (["/venv/bin/pytest"], {}, False),
        ([], {}, False),
    ],
)
def test_is_web_server(argv, environ, expected):
    assert is_web_server(argv, environ) is expected


def test_only_runserver_installs_daphne():
    done = run(
        """
        import django
        from django.conf import settings
        for argv in (["manage.py", "runserver"], ["manage.py", "migrate"], ["/venv/bin/uvicorn"]):
            sys.argv = argv
            import importlib, chat_platform.settings.core as core
            importlib.reload(core)
            print(argv[-1], "daphne" in core.INSTALLED_APPS)
        """,
        DEBUG="true",
    )
    assert done.stdout.split("\n")[:3] == [
        "runserver True",
        "migrate False",
        "/venv/bin/uvicorn False",
    ]


def test_a_worker_warms_the_gateway_and_the_beats_upkeep_lane_does_not(monkeypatch):
    """The beat's process (``-Q upkeep``) runs no turn: it never imports litellm."""
    import importlib

    celery_app = importlib.import_module("chat_platform.celery_app")

    warmed = []
    monkeypatch.setattr(celery_app, "warm_in_background", lambda name, then: warmed.append(name))
    for queues in ({"upkeep"}, {"chat", "compaction", "heavy"}, {"chat"}):
        monkeypatch.setattr(celery_app, "_consumed", frozenset(queues))
        celery_app._warm_gateway_on_ready()
    assert warmed == ["worker", "worker"]
