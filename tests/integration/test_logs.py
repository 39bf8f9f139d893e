"""Real mode: every process writes one JSON event per line, tracebacks included."""

import json
import subprocess
import sys
import time

import pytest
from django.conf import settings

from chat_platform.celery_app import app as celery_app
from tests.integration.processes import ROOT, celery_worker, process_env

pytestmark = [pytest.mark.crossprocess]


# What Celery writes to the terminal itself, from its signal handlers (os.write, not logging,
# so it is safe there) or for the test harness's --purge: not log events.
NOT_LOG_EVENTS = ("worker: Warm shutdown (MainProcess)", "purge: Erased ")


def _json_lines(text: str) -> list[dict]:
    lines = [
        line for line in text.splitlines() if line.strip() and not line.startswith(NOT_LOG_EVENTS)
    ]
    assert lines
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line: {line!r}\n---\n{text[-3000:]}")
    return events


@pytest.fixture
def real_env(django_db_setup):
    db = settings.DATABASES["default"]
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return process_env(DATABASE_URL=url, DEBUG="false", LOG_JSON="true")


def test_worker_writes_json_lines_with_tracebacks(real_env, tmp_path):
    log = tmp_path / "worker.log"
    with celery_worker(real_env, log):
        # A message the worker cannot run: Celery logs it as an error with the KeyError's
        # traceback.
        celery_app.send_task("tests.no_such_task", queue="chat")
        deadline = time.monotonic() + 30
        while b"no_such_task" not in log.read_bytes():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(0.5)
    events = _json_lines(log.read_text())
    assert any(e["logger"].startswith("celery") and "ready" in e["event"] for e in events)
    [unregistered] = [e for e in events if "tests.no_such_task" in e["event"]]
    assert unregistered["level"] == "error"
    assert unregistered["exception"].startswith("Traceback (most recent call last):")
    assert "KeyError: 'tests.no_such_task'" in unregistered["exception"]
    assert not any("exc_info" in e for e in events)


def test_beat_writes_json_lines(real_env, tmp_path):
    log = tmp_path / "beat.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(  # noqa: S603
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "chat_platform",
                "-q",
                # as deployed (make beat): beat and its upkeep lane
                "worker",
                "-B",
                "-Q",
                "upkeep",
                "-P",
                "threads",
                "-c",
                "2",
                "-n",
                "upkeep@%h",
                "-s",
                str(tmp_path / "schedule"),
                "-l",
                "INFO",
            ],
            cwd=ROOT,
            env=real_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            while b"Sending due task" not in log.read_bytes():
                assert process.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
        finally:
            process.terminate()
            process.wait(timeout=15)
    events = _json_lines(log.read_text())
    assert any("Sending due task" in e["event"] for e in events), events
    # "uncaught": beat stopped mid-tick can raise from its closed schedule file on the way out
    # (a Celery race); that traceback is a JSON event too.
    assert all(
        e["logger"].startswith("celery") or e["logger"] in ("py.warnings", "uncaught")
        for e in events
    )
