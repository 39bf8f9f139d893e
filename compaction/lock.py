"""Single-flight: one compaction per session at a time, across every process.

Real mode: a redis-py ``Lock`` per session (a lease with expiry and token-checked release), kept
alive by a heartbeat while its holder works, so a killed worker's lease simply runs out.
Embedded mode: an in-process lock per session. Nothing here is durable: losing Redis loses no
data, only the lease.
"""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog
from django.conf import settings

from chat_platform.dbconn import connection_release
from chat_platform.errors import ServiceUnavailable
from chat_platform.realtime import redis_client

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Flight:
    acquired: bool
    # True when the caller had to wait for another holder first: its result is fresh.
    waited: bool


def lock_key(session_id: int, bot_id: int | None = None) -> str:
    """The session's lease; in a room each bot has its own (docs/rooms.md: one bot's compaction
    never blocks another's reply)."""
    if bot_id is None:
        return f"chat-platform:compaction:session:{session_id}"
    return f"chat-platform:compaction:session:{session_id}:bot:{bot_id}"


_local_guard = threading.Lock()
_local_locks: dict[tuple[int, int | None], threading.Lock] = {}


def _local_lock(session_id: int, bot_id: int | None = None) -> threading.Lock:
    with _local_guard:
        return _local_locks.setdefault((session_id, bot_id), threading.Lock())


class _Heartbeat(threading.Thread):
    """Extends the lease every third of its length until stopped."""

    def __init__(self, lock, lease: float) -> None:
        super().__init__(daemon=True, name="compaction-lease")
        self.lock = lock
        self.lease = lease
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.lease / 3):
            try:
                self.lock.reacquire()
            except Exception:  # lost the lease (expired or Redis gone): stop extending
                return


@contextmanager
def single_flight(session_id: int, *, wait: float, bot_id: int | None = None) -> Iterator[Flight]:
    """Hold the session's (in a room: the bot's) compaction lease; ``wait`` seconds at most
    (0 = don't wait)."""
    if not settings.REDIS_URL:
        lock = _local_lock(session_id, bot_id)
        waited = not lock.acquire(blocking=False)
        if waited and (wait <= 0 or not _wait_released(lambda: lock.acquire(timeout=wait))):
            yield Flight(acquired=False, waited=wait > 0)
            return
        try:
            yield Flight(acquired=True, waited=waited)
        finally:
            lock.release()
        return

    lease = settings.COMPACTION_LOCK_LEASE_SECONDS
    lock = redis_client().lock(lock_key(session_id, bot_id), timeout=lease, thread_local=False)
    waited = False
    with _redis_required():
        acquired = lock.acquire(blocking=False)
        if not acquired:
            waited = True
            deadline = time.monotonic() + wait
            acquired = wait > 0 and _wait_released(
                lambda: lock.acquire(blocking=True, blocking_timeout=wait)
            )
    if not acquired:
        yield Flight(acquired=False, waited=wait > 0 and time.monotonic() >= deadline)
        return
    heartbeat = _Heartbeat(lock, lease)
    heartbeat.start()
    try:
        yield Flight(acquired=True, waited=waited)
    finally:
        heartbeat.stopped.set()
        try:
            lock.release()
        except Exception:  # the lease expired meanwhile; someone else may hold it now
            log.warning("compaction_lease_lost", session_id=session_id, bot_id=bot_id)


def _wait_released(acquire: Callable[[], bool]) -> bool:
    """Wait for another holder with the database connection given back: callers queued behind
    a long compaction must not hold the pool meanwhile (docs/security.md)."""
    connection_release()
    return bool(acquire())


def in_flight(session_id: int, bot_id: int | None = None) -> bool:
    if not settings.REDIS_URL:
        return _local_lock(session_id, bot_id).locked()
    with _redis_required():
        return bool(redis_client().exists(lock_key(session_id, bot_id)))


@contextmanager
def _redis_required() -> Iterator[None]:
    """Without Redis there is no single-flight guarantee: refuse (503) rather than compact
    unguarded. Nothing has been written when this raises."""
    import redis

    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        log.warning("compaction_lock_unavailable", error=str(exc))
        raise ServiceUnavailable(
            "Compaction needs Redis, which is not answering; nothing was changed. "
            "Try again shortly."
        ) from exc
