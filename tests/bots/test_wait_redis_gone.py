"""A `wait: true` send (or a `/v1` call) whose Redis stops answering while it waits keeps
waiting on the database (bots.realtime.wait_reply_finished): the question is stored and its
reply goes on in a worker, so the waiter must not answer 503 "nothing was changed"."""

import redis

from bots import realtime
from chat_platform import realtime as transport


class _GonePubSub:
    def subscribe(self, *channels):
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    def close(self):
        raise redis.ConnectionError("Connection refused.")


class _GoneRedis:
    def pubsub(self):
        return _GonePubSub()


def test_a_wait_whose_redis_went_away_reads_the_reply_until_it_ends(settings, monkeypatch):
    settings.REDIS_URL = "redis://127.0.0.1:6379/0"
    monkeypatch.setattr(transport, "redis_client", lambda: _GoneRedis())
    monkeypatch.setattr(realtime, "WAIT_POLL_SECONDS", 0.01, raising=False)
    checks = []

    def is_finished():
        checks.append(1)
        return len(checks) == 3  # the worker ends the reply meanwhile

    realtime.wait_reply_finished(7, is_finished=is_finished, timeout=30)

    assert len(checks) == 3


def test_it_still_ends_at_its_deadline(settings, monkeypatch):
    settings.REDIS_URL = "redis://127.0.0.1:6379/0"
    monkeypatch.setattr(transport, "redis_client", lambda: _GoneRedis())
    monkeypatch.setattr(realtime, "WAIT_POLL_SECONDS", 0.01, raising=False)

    realtime.wait_reply_finished(7, is_finished=lambda: False, timeout=0.05)
