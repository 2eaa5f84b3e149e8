"""Results of recent searches, kept while nothing they read has changed (issue 12).

An agent sends the same prompt again (a retry, a resumed session, the same question asked
twice): its ranked hits are the same as long as memory and its index are. Each result is kept
with the ``generation`` it was computed at (anything that moves whenever memory or the index
does) and served only while that is still the generation and the result is younger than
``max_age_s`` (recency scores move with the clock, slowly).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class ResultCache(Generic[T]):
    """A bounded map of key → (generation, time, value), least recently used out first; safe to
    share between threads."""

    def __init__(self, size: int = 256, max_age_s: float = 60.0) -> None:
        self._size = size
        self._max_age_s = max_age_s
        self._items: OrderedDict[Hashable, tuple[Hashable, float, T]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, generation: Hashable, now: float) -> T | None:
        with self._lock:
            found = self._items.get(key)
            if (
                found is None
                or found[0] != generation
                or not 0 <= now - found[1] <= self._max_age_s
            ):
                if found is not None:
                    del self._items[key]
                return None
            self._items.move_to_end(key)
            return found[2]

    def put(self, key: Hashable, generation: Hashable, now: float, value: T) -> None:
        if self._size <= 0:
            return
        with self._lock:
            self._items[key] = (generation, now, value)
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
