"""The vector side of a search, kept per process between searches (docs/memory.md, "Hybrid
search"): a session's vectors in their thread (``memory.embeddings``), read and smoothed once,
then reused while the rows they came from are unchanged.

What a search reads for its vectors (a session's newest vectors of one model, with role and
bot, ~1.5 KB a message) costs more than multiplying them, and what is done with them before the
question comes in (each vector in its thread, ``NEIGHBOUR_WEIGHT``) does not depend on the
question. So the rows and their smoothed matrix are kept, keyed by what selected and smoothed
them (the database, the session, the model, ``live_before``, the query's size, the constants),
and checked before each use against a **version** of the rows read: their count and the sum of
their ``xmin`` (PostgreSQL's id of the transaction that last wrote a row, which every insert
and update changes). Any row added, deleted, re-embedded or taken into a snapshot changes the
version (an update gives its row a newer transaction id than any it had: the sum moves), and
the next search reads again. The check is one statement over the index rows (no vectors, no
join), in place of the read.

PostgreSQL only: SQLite has no ``xmin`` and reads its vectors in-process anyway. Bounded by
``MAX_BYTES`` of vectors (least recently used first out; a session larger than that is never
kept); thread-safe (the in-process task threads search too).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from chat_platform.lru import LRU

# Vectors kept per process, all sessions together: ~30 sessions of 1,000 messages at 384 floats.
MAX_BYTES = 48 * 1024 * 1024


@dataclass(frozen=True)
class Entry:
    version: tuple[int, str]  # (rows, fingerprint)
    parts: list[tuple[list[tuple[int, int, int]], Any]]  # (message id, seq, record id), matrix
    size: int  # bytes of the matrices


def fingerprint(versions: list[tuple[int, str]]) -> str:
    """What PostgreSQL's version statement computes of the rows read: the md5 of their versions
    (``xmin:ctid``) joined by commas, newest seq first; ``""`` for none."""
    if not versions:
        return ""
    ordered = sorted(versions, key=lambda pair: -pair[0])
    return hashlib.md5(",".join(v for _, v in ordered).encode(), usedforsecurity=False).hexdigest()


def vectors_kept(max_bytes: int = MAX_BYTES) -> LRU[tuple, Entry]:
    """A cache of vectors bounded by the bytes of their matrices (``chat_platform.lru``)."""
    return LRU(max_bytes, weight=_entry_bytes)


def _entry_bytes(entry: Entry) -> int:
    return entry.size


cache = vectors_kept()
