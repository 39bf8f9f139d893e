"""A frame the channel layer could not take is logged, but not one line per frame: while Redis
was down a turn's every delta logged ``realtime_send_failed``, ~40 lines a second per process.
One line every five seconds at most, with how many frames it stands for."""

from structlog.testing import capture_logs

from chat_platform import realtime


def _lines(logs):
    return [
        (e["session_id"], e["frame_type"], e["frames"])
        for e in logs
        if e["event"] == "realtime_send_failed"
    ]


def test_failures_are_logged_once_every_five_seconds_with_their_count():
    now = [100.0]
    failures = realtime._FailureLog(lambda: now[0])
    with capture_logs() as logs:
        for _ in range(40):
            failures.note(session_id=7, frames=[{"type": "message.delta"}])
            now[0] += 0.1
        now[0] += 1.5  # 5.5 s after the first line
        failures.note(session_id=8, frames=[{"type": "message.completed"}, {"type": "x"}])
    assert _lines(logs) == [(7, "message.delta", 1), (8, "message.completed", 41)]


def test_a_layer_that_refuses_every_frame_logs_one_line(monkeypatch):
    class Down:
        async def group_send(self, group, message):
            raise ConnectionError("Redis is down")

    monkeypatch.setattr(realtime, "get_channel_layer", lambda: Down())
    fresh = realtime._FailureLog(lambda: 0.0) if hasattr(realtime, "_FailureLog") else None
    monkeypatch.setattr(realtime, "_failures", fresh, raising=False)
    with capture_logs() as logs:
        for _ in range(30):
            realtime.send_frames(5, [{"type": "message.delta", "delta": "a"}])
    # Before: 30 lines.
    assert _lines(logs) == [(5, "message.delta", 1)]
    assert realtime._failures.held == 29
