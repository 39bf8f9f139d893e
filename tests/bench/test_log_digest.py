"""A bench stack's log digest (``bench/_logdigest.py``): what a failed smoke run prints about its
servers, the only trace a CI run keeps of why turns were refused."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from _logdigest import log_digest  # noqa: E402


def _line(**record) -> str:
    return json.dumps(record)


def test_loud_events_are_counted_with_an_example_and_the_noise_is_left_out(tmp_path):
    web = tmp_path / "web.log"
    timeout = (
        "Traceback (most recent call last):\n  ...\nOperationalError: couldn't get a connection"
    )
    web.write_text(
        "\n".join(
            [
                _line(event="ws_auth_unavailable", level="error", exception=timeout),
                _line(event="ws_auth_unavailable", level="error", exception=timeout),
                _line(event="turn_sent", level="info"),
                _line(
                    event="Unauthorized: /api/v1/bots/", level="warning", logger="django.request"
                ),
                _line(event="SecurityWarning: ...", level="warning", logger="py.warnings"),
                "INFO:     Started server process [12]",
            ]
        )
    )
    worker = tmp_path / "worker.log"
    worker.write_text(
        _line(event="turn_failed", level="warning")
        + "\nredis.exceptions.ConnectionError: Error 111 connecting"
    )
    assert log_digest([web, worker, tmp_path / "missing.log"]) == [
        "web error ws_auth_unavailable x2: OperationalError: couldn't get a connection",
        "worker warning turn_failed x1",
        "worker raw redis.exceptions.ConnectionError: Error 111 connecting x1",
    ]


def test_a_quiet_stack_says_nothing_and_many_kinds_are_cut_to_the_limit(tmp_path):
    log = tmp_path / "web.log"
    log.write_text(_line(event="turn_sent", level="info"))
    assert log_digest([log]) == []
    log.write_text("\n".join(_line(event=f"e{i}", level="error") for i in range(4)))
    assert log_digest([log], limit=2) == [
        "web error e0 x1",
        "web error e1 x1",
        "... and 2 other kinds",
    ]
