"""JSON logging covers what nothing caught: one event per line, in any thread."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import threading
from chat_platform.log_config import configure_logging
configure_logging(level="INFO", json=JSON)
side = threading.Thread(target=lambda: 1 / 0, name="side")
side.start()
side.join()
raise ValueError("invalid operation on closed shelf")
"""


def _run(json_mode: bool) -> subprocess.CompletedProcess:
    return subprocess.run(  # noqa: S603
        [sys.executable, "-c", SCRIPT.replace("JSON", str(json_mode))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_uncaught_exceptions_are_json_events_in_json_mode():
    done = _run(True)
    assert done.returncode == 1
    events = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["event"], e["level"], e["logger"], e.get("thread")) for e in events] == [
        ("uncaught_exception", "critical", "uncaught", "side"),
        ("uncaught_exception", "critical", "uncaught", None),
    ]
    assert events[0]["exception"].endswith("ZeroDivisionError: division by zero")
    assert events[1]["exception"].startswith("Traceback (most recent call last):")
    assert events[1]["exception"].endswith("ValueError: invalid operation on closed shelf")


def test_the_console_mode_keeps_pythons_own_traceback():
    done = _run(False)
    assert done.returncode == 1
    assert "Exception in thread side:" in done.stderr
    assert done.stderr.rstrip().endswith("ValueError: invalid operation on closed shelf")
