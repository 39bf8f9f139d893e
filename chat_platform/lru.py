"""A map that keeps what was used last, bounded by a weight: each value weighs what ``weight``
says (1 by default: a count of entries; bytes for the search's vectors), and the least
recently used go first when the total passes ``max_weight``. A value heavier than the whole is
never kept. One lock: the threads of a process share it.

Used by ``chat_platform.llm.tokens`` (token counts by digest) and ``memory.vector_cache`` (a
session's vectors between searches)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _one(_value: object) -> int:
    return 1


class LRU(Generic[K, V]):
    def __init__(self, max_weight: int, weight: Callable[[V], int] = _one) -> None:
        self.max_weight = max_weight
        self.weight = weight
        self.entries: OrderedDict[K, V] = OrderedDict()
        self.used = 0
        self.lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self.lock:
            value = self.entries.get(key)
            if value is not None:
                self.entries.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` under ``key`` (replacing what was there), then drop the least recently
        used until the total weight is within ``max_weight``."""
        weight = self.weight(value)
        with self.lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.used -= self.weight(old)
            if weight > self.max_weight:
                return
            self.entries[key] = value
            self.used += weight
            while self.used > self.max_weight:
                _, dropped = self.entries.popitem(last=False)
                self.used -= self.weight(dropped)

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.used = 0
