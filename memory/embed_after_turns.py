"""Turns first: a process embeds the messages its turns wrote when no turn runs in it
(docs/performance.md "Turns first").

Embedding a turn's question and reply with the built-in model costs about 40 ms of CPU, more
than the rest of the worker's share of the turn (``bench/concurrent_sessions.py``: 68 ms a turn
with it, 27 without). Run beside the turns, under a burst it stretched every one of them. So an
embedding task hands its session to this process's queue, and one task at a time (the drainer)
embeds the queued sessions, oldest first, each once no turn is running in the process
(``chat_platform.foreground``) or once it has waited ``EMBED_DEFER_MAX_SECONDS`` (a process that
is never idle still embeds, that late). A session queued again before its turn is embedded once,
its message ids merged. The drainer waits holding no database connection; the other tasks
return at once, so the queue holds one task thread of the process, not one per turn.

The queue is the process's memory. A process that stops with sessions queued (a worker's warm
shutdown drains nothing more) leaves their rows pending, as a failed batch does, and the next
compaction of the session embeds them: nothing is lost.
"""

import threading
import time

import structlog
from django.conf import settings
from django.db import connection

from chat_platform import foreground
from memory.embeddings import messages_embed_pending

log = structlog.get_logger(__name__)

# How often a waiting drainer looks at the stop flag (a worker's warm shutdown).
_STOP_CHECK_SECONDS = 0.5

_lock = threading.Lock()
# session id -> (when it was queued, its message ids; None: every pending message of it)
_queue: dict[int, tuple[float, set[int] | None]] = {}
_draining = False
_stopping = threading.Event()


def messages_embed_after_turns(*, session_id: int, message_ids: list[int] | None = None) -> None:
    """Queue the session's messages for embedding; the first caller while nobody drains drains
    the queue (on its own thread), the others return at once."""
    global _draining
    with _lock:
        queued = _queue.get(session_id)
        ids = None if message_ids is None else set(message_ids)
        if queued is not None:
            ids = None if ids is None or queued[1] is None else queued[1] | ids
        _queue[session_id] = (queued[0] if queued else time.monotonic(), ids)
        if _draining:
            return
        _draining = True
    _drain()


def queued() -> int:
    """Sessions queued in this process (tests, the bench)."""
    return len(_queue)


def stop() -> None:
    """The process is stopping: the drainer embeds nothing more (what is queued stays pending)."""
    _stopping.set()


def _drain() -> None:
    global _draining
    try:
        while True:
            with _lock:
                if not _queue or _stopping.is_set():
                    _draining = False
                    return
                session_id, (since, _) = next(iter(_queue.items()))
            _wait_for_turns(until=since + settings.EMBED_DEFER_MAX_SECONDS)
            with _lock:
                if _stopping.is_set():
                    continue
                _, ids = _queue.pop(session_id)
            try:
                messages_embed_pending(
                    session_id=session_id, message_ids=None if ids is None else sorted(ids)
                )
            except Exception:  # one session's failure is its own: its rows stay pending
                log.exception("memory_embedding_run_failed", session_id=session_id)
    except BaseException:
        with _lock:
            _draining = False
        raise


def _wait_for_turns(*, until: float) -> None:
    """Until no turn runs in this process, ``until`` (monotonic) passes, or the process stops."""
    if not foreground.running() or until <= time.monotonic():
        return
    connection.close()  # a wait holds no database connection
    while not _stopping.is_set():
        left = until - time.monotonic()
        if left <= 0 or foreground.wait_idle(min(left, _STOP_CHECK_SECONDS)):
            return
