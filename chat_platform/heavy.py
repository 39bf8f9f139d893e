"""A per-user limit on concurrent heavy requests (docs/security.md, "Heavy requests").

A heavy request keeps a web thread busy while it waits on a model, a compaction lease or a
reply: manual compaction (REST, ``/compact`` typed in chat, the websocket), re-summarise, undo,
model discovery, imports, ``wait: true`` sends and ``/v1`` calls that wait for their reply. Each one
holds one of its user's ``HEAVY_REQUESTS_PER_USER`` slots while it runs; one more is refused at
once, before anything is written, with 429 ``rate_limited`` and ``Retry-After``. One user
repeating ``/compact`` can then occupy only that many threads, never every thread of the web
tier (each waiter also gives its database connection back, ``chat_platform/dbconn.py``).

Real mode: one Redis sorted set per user, one member per held slot scored by its expiry, taken
and counted in one script, so every web process shares the count. A slot of a killed process
lapses after ``SLOT_SECONDS``. Embedded mode (one process): a counter in memory. If Redis does
not answer, the limit is not enforced (logged): it guards capacity, and the request meets the
outage as it would have without it.

A request holds one slot however many heavy steps it takes (a ``wait: true`` send of
``/compact``): a nested ``heavy_request`` of the same user in the same thread takes none.
"""

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis
import structlog
from django.conf import settings

from chat_platform.errors import RateLimited
from chat_platform.realtime import redis_client

log = structlog.get_logger(__name__)

# A slot whose holder died is free again after this long; a live heavy request (a 60 s lease
# wait plus the summariser calls of a manual compaction, a 120 s reply wait) ends well before.
SLOT_SECONDS = 900
# What ``Retry-After`` says: a compaction or a reply usually ends within a few seconds.
RETRY_AFTER_SECONDS = 5

# KEYS[1] the user's set; ARGV: limit, slot seconds, token. Redis's own clock, so the processes'
# clocks need not agree.
_TAKE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], t + tonumber(ARGV[2]), ARGV[3])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
return 1
"""


def slots_key(user_id: int) -> str:
    return f"chat-platform:heavy:user:{user_id}"


_held = threading.local()
_local_guard = threading.Lock()
_local_counts: dict[int, int] = {}


@contextmanager
def heavy_request(*, user_id: int | None, kind: str) -> Iterator[None]:
    """Hold one of the user's heavy-request slots for the block; ``RateLimited`` when all are
    taken (nothing has run yet). ``kind`` names the request in the log."""
    held: set[int] = _held.__dict__.setdefault("users", set())
    if user_id is None or user_id in held:
        yield
        return
    token = slot_take(user_id=user_id, kind=kind)
    held.add(user_id)
    try:
        yield
    finally:
        held.discard(user_id)
        _give_back(user_id, token)


def slot_take(*, user_id: int, kind: str) -> str:
    """One of the user's slots, for a request whose steps run on several threads (an async
    view, ``openai_api/views.py``): its token for ``slot_give_back``. ``RateLimited`` when all
    are taken (nothing has run yet)."""
    limit = settings.HEAVY_REQUESTS_PER_USER
    token = _take(user_id, limit)
    if token is None:
        log.info("heavy_request_refused", user_id=user_id, kind=kind, limit=limit)
        raise heavy_refusal(limit)
    return token


def slot_give_back(*, user_id: int, token: str) -> None:
    _give_back(user_id, token)


def heavy_refusal(limit: int) -> RateLimited:
    """The one refusal of a heavy request past the user's limit (also of an import job past the
    user's unfinished ones, ``transfer/services/jobs.py``)."""
    return RateLimited(
        f"You already have {limit} long-running request(s) in progress (compaction, "
        "re-summary, model discovery, an import or a send that waits for its reply). Try "
        "again when one has finished.",
        retry_after=RETRY_AFTER_SECONDS,
        details={"limit": limit},
    )


def _take(user_id: int, limit: int) -> str | None:
    """A slot's token, or None when the user holds ``limit`` already."""
    if not settings.REDIS_URL:
        with _local_guard:
            if _local_counts.get(user_id, 0) >= limit:
                return None
            _local_counts[user_id] = _local_counts.get(user_id, 0) + 1
        return "local"
    token = uuid.uuid4().hex
    try:
        client = redis_client()
        taken = client.register_script(_TAKE)(
            keys=[slots_key(user_id)], args=[limit, SLOT_SECONDS, token]
        )
    except redis.RedisError as exc:
        log.warning("heavy_request_limit_unavailable", user_id=user_id, error=str(exc))
        return ""  # not counted: nothing to give back
    return token if taken else None


def _give_back(user_id: int, token: str) -> None:
    if token == "local":
        with _local_guard:
            left = _local_counts.get(user_id, 1) - 1
            if left > 0:
                _local_counts[user_id] = left
            else:
                _local_counts.pop(user_id, None)
        return
    if not token:
        return
    try:
        redis_client().zrem(slots_key(user_id), token)
    except redis.RedisError as exc:  # the slot lapses by itself after SLOT_SECONDS
        log.warning("heavy_request_release_failed", user_id=user_id, error=str(exc))
