"""The README's real-mode commands work as written (issue 32): `make web` collects the static
files and listens on HOST/PORT (defaults 0.0.0.0:8000), `make beat` keeps its schedule file in
an ignored folder, and with DEBUG false whitenoise serves the collected files."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

ROOT = Path(__file__).resolve().parent.parent


def _make_n(*args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"HOST", "PORT", "BEAT_SCHEDULE"}}
    done = subprocess.run(
        ["make", "-s", "-n", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


def test_make_web_collects_static_then_listens_on_host_and_port():
    uvicorn = (
        ".venv/bin/uvicorn chat_platform.asgi:application --host {} --port {} --workers 2 "
        "--timeout-graceful-shutdown 5 --ws-max-size 8388608"
    )
    collect = ".venv/bin/python manage.py collectstatic --noinput -v 0"
    assert _make_n("web") == [collect, uvicorn.format("0.0.0.0", "8000")]
    assert _make_n("web", "HOST=127.0.0.1", "PORT=9001") == [
        collect,
        uvicorn.format("127.0.0.1", "9001"),
    ]


def test_make_beat_keeps_its_schedule_in_an_ignored_folder():
    assert _make_n("beat") == [
        "mkdir -p var/",
        ".venv/bin/celery -A chat_platform -q worker -B -Q upkeep -P threads -c 2 -n upkeep@%h "
        "-l INFO --schedule var/celerybeat-schedule",
    ]
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "var/celerybeat-schedule.db"], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0


@pytest.mark.timeout(300)
def test_collected_static_files_are_served_with_debug_off(tmp_path):
    with override_settings(STATIC_ROOT=tmp_path, DEBUG=False, WHITENOISE_USE_FINDERS=False):
        call_command("collectstatic", "--noinput", "-v", "0")
        response = Client().get("/static/chat/css/base.css")  # a new client: whitenoise re-reads
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/css")
        body = b"".join(response.streaming_content)
        assert body == (ROOT / "static" / "chat" / "css" / "base.css").read_bytes()


def test_real_mode_passes_the_connection_encryption_key_as_the_readme_says():
    """Issue 32, Deliver 2 in real mode: the README's real-mode steps and docker-compose.yml's
    app services carry CONNECTION_ENCRYPTION_KEY, so a staff user can save a keyed connection
    there too (without it: "CONNECTION_ENCRYPTION_KEY is not set on the server")."""
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = compose["x-app-env"]
    assert env["CONNECTION_ENCRYPTION_KEY"] == "${CONNECTION_ENCRYPTION_KEY:-}"
    for name in ("web", "worker", "beat"):
        service = compose["services"][name]
        assert service["environment"]["CONNECTION_ENCRYPTION_KEY"] == (
            "${CONNECTION_ENCRYPTION_KEY:-}"
        ), name
    readme = (ROOT / "README.md").read_text()
    (export,) = [line for line in readme.splitlines() if line.startswith("export SECRET_KEY=")]
    assert "CONNECTION_ENCRYPTION_KEY=…" in export.split()


def test_every_web_server_start_caps_a_websocket_frame():
    """uvicorn's default frame cap is 16 MB; the largest legitimate frame is a send of
    MESSAGE_MAX_BYTES escaped as JSON (at most six bytes a byte, docs/security.md). Every start
    for users passes the cap the real-stack tests run with (tests/integration/processes.py)."""
    import yaml

    from tests.integration.processes import WS_MAX_SIZE
    from tests.integration.test_ws_frame_limit import largest_send

    assert len(largest_send()) <= WS_MAX_SIZE == 8 * 1024 * 1024
    flag = ["--ws-max-size", str(WS_MAX_SIZE)]
    (web,) = [line for line in _make_n("web") if "uvicorn" in line]
    starts = {
        "Makefile": web.split(),
        "scripts/run.sh": (ROOT / "scripts/run.sh").read_text().split(),
        "docker-compose.yml": yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"][
            "web"
        ]["command"],
    }
    (cmd,) = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if "CMD" in line]
    starts["Dockerfile"] = json.loads(cmd.removeprefix("CMD "))
    for name, words in starts.items():
        at = words.index("--ws-max-size")
        assert words[at : at + 2] == flag, name
