"""One timer structure for every watched handle: a heap of due times (pure, no I/O).

Rescheduling a key pushes a new entry and invalidates the old one lazily, so each operation
is O(log n) and 10,000 handles cost one heap, not 10,000 sleeping coroutines.
"""

from __future__ import annotations

import heapq
import itertools


class DueQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str]] = []
        self._current: dict[str, int] = {}  # key -> entry id of its live heap entry
        self._due: dict[str, int] = {}  # key -> its live due time
        self._ids = itertools.count()

    def __len__(self) -> int:
        return len(self._current)

    def __contains__(self, key: str) -> bool:
        return key in self._current

    def schedule(self, key: str, due_ms: int) -> None:
        """Set (or move) ``key``'s due time."""
        entry = next(self._ids)
        self._current[key] = entry
        self._due[key] = due_ms
        heapq.heappush(self._heap, (due_ms, entry, key))

    def discard(self, key: str) -> None:
        self._current.pop(key, None)
        self._due.pop(key, None)

    def due(self, key: str) -> int | None:
        """``key``'s due time, or ``None`` if it is not queued."""
        return self._due.get(key)

    def next_due(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[str, int]]:
        """Remove and return up to ``limit`` keys due at ``now_ms``, oldest due first."""
        taken: list[tuple[str, int]] = []
        while len(taken) < limit:
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now_ms:
                break
            due, _, key = heapq.heappop(self._heap)
            del self._current[key]
            del self._due[key]
            taken.append((key, due))
        return taken

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap and self._current.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)
