"""Turns first: a process embeds the messages its turns wrote when no turn runs in it
(docs/performance.md "Turns first").

Embedding a turn's question and reply with the built-in model costs about 40 ms of CPU, more
than the rest of the worker's share of the turn (``bench/concurrent_sessions.py``: 68 ms a turn
with it, 27 without). Run beside the turns, under a burst it stretched every one of them. So an
embedding task only queues its session on the process's background thread
(``chat_platform.foreground.after_foreground``), which embeds each queued session once no turn
runs in the process, or once it has waited ``EMBED_DEFER_MAX_SECONDS``. A session queued again
before it is embedded is embedded once, its message ids merged.

What is queued when a process stops (a worker's warm shutdown starts nothing more) stays
pending in the database, as after a failed batch, and the next compaction of the session
embeds it: nothing is lost.
"""

import threading
from functools import partial

from django.conf import settings

from chat_platform import foreground
from memory.embeddings import messages_embed_pending

_lock = threading.Lock()
# session id -> its queued message ids (None: every pending message of the session)
_queued: dict[int, set[int] | None] = {}


def messages_embed_after_turns(*, session_id: int, message_ids: list[int] | None = None) -> None:
    """Queue the session's messages for embedding after this process's turns; returns at once."""
    with _lock:
        ids = None if message_ids is None else set(message_ids)
        if session_id in _queued:
            earlier = _queued[session_id]
            ids = None if ids is None or earlier is None else earlier | ids
        _queued[session_id] = ids
    foreground.after_foreground(
        ("embed", session_id),
        partial(_embed_queued, session_id),
        max_wait=settings.EMBED_DEFER_MAX_SECONDS,
    )


def _embed_queued(session_id: int) -> None:
    with _lock:
        if session_id not in _queued:
            return
        ids = _queued.pop(session_id)
    messages_embed_pending(session_id=session_id, message_ids=None if ids is None else sorted(ids))
