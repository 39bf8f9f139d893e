"""JSON logging covers what nothing caught: one event per line, in any thread."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

from chat_platform.log_config import quiet_known_warnings

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


# A stop signal whose handler raises SystemExit while a weakref callback runs (celery beat's
# SIGTERM handler does): Python reports the SystemExit as unraisable and carries on, so the
# process never stops. The hook delivers the signal again.
SWALLOWED_STOP = """
import signal, sys, time, weakref
from chat_platform.log_config import configure_logging
configure_logging(level="INFO", json=True)
calls = []
def on_term(signum, frame):
    calls.append(signum)
    raise SystemExit(3)
signal.signal(signal.SIGTERM, on_term)
class Thing:
    pass
def callback(ref):
    signal.raise_signal(signal.SIGTERM)  # the handler runs here: its SystemExit is swallowed
thing = Thing()
keep = weakref.ref(thing, callback)
try:
    del thing
    time.sleep(10)  # one long sleep, as beat's tick does: the signal must wake it
    print("still running after", len(calls), "signal(s)", flush=True)
    sys.exit(0)
except SystemExit as stop:
    print("stopped after", len(calls), "signal(s) with", stop.code, flush=True)
    raise
"""


def test_a_stop_swallowed_by_a_finaliser_is_delivered_again():
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", SWALLOWED_STOP],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout == "stopped after 2 signal(s) with 3\n", done.stderr
    assert done.returncode == 3
    events = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["event"], e["logger"]) for e in events] == [("unraisable_exception", "uncaught")]
    assert events[0]["exception"].endswith("SystemExit: 3")


def test_the_sync_streaming_body_warning_is_dropped_and_no_other():
    """WhiteNoise's static files under ASGI: one such warning per file of every page load."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_known_warnings()
        warnings.warn(
            "StreamingHttpResponse must consume synchronous iterators in order to serve them "
            "asynchronously. Use an asynchronous iterator instead.",
            Warning,
            stacklevel=1,
        )
        warnings.warn("a streamed body went wrong", Warning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["a streamed body went wrong"]
