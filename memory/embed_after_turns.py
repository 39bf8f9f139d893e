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
from memory.embeddings import Quota, messages_embed_pending

QuotaKey = tuple[tuple[str, int], ...]

_lock = threading.Lock()
# (session id, the key's limits it is charged to) -> its queued message ids (None: every
# pending message of the session). A session queued by two keys' turns is embedded once for
# each: each key pays for the messages its own turns wrote.
_queued: dict[tuple[int, QuotaKey], set[int] | None] = {}


def messages_embed_after_turns(
    *, session_id: int, message_ids: list[int] | None = None, quota: Quota = None
) -> None:
    """Queue the session's messages for embedding after this process's turns; returns at once.
    ``quota``: the limits of the API key whose turn wrote them (``usage.scope_pairs``)."""
    key = (session_id, tuple((str(subject), int(limit)) for subject, limit in quota or ()))
    with _lock:
        ids = None if message_ids is None else set(message_ids)
        if key in _queued:
            earlier = _queued[key]
            ids = None if ids is None or earlier is None else earlier | ids
        _queued[key] = ids
    foreground.after_foreground(
        ("embed", *key),
        partial(_embed_queued, key),
        max_wait=settings.EMBED_DEFER_MAX_SECONDS,
    )


def _embed_queued(key: tuple[int, QuotaKey]) -> None:
    with _lock:
        if key not in _queued:
            return
        ids = _queued.pop(key)
    messages_embed_pending(
        session_id=key[0],
        message_ids=None if ids is None else sorted(ids),
        quota=[list(pair) for pair in key[1]] or None,
    )
