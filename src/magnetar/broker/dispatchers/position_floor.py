"""The lowest of many positions, kept up to date cheaply as they move.

A broadcast subscription's cursor may only advance to what every one of its consumers has
acknowledged: the lowest of their virtual cursors. With 100K consumers, a scan per ack would
cost 100K steps; this keeps a count per distinct position and a heap of them, so a move costs
O(log distinct positions), and consumers that keep up share a handful of positions.
"""

from __future__ import annotations

import heapq

from magnetar.storage.position import Position


class PositionFloor:
    """A multiset of positions answering ``lowest()``."""

    def __init__(self) -> None:
        self._counts: dict[Position, int] = {}
        #: Every distinct position present, plus stale ones popped lazily from the top.
        self._heap: list[Position] = []
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, position: Position) -> None:
        count = self._counts.get(position, 0)
        if count == 0:
            heap = self._heap
            if len(heap) > 2 * len(self._counts) + 64:
                # Stale positions below a slow consumer's never reach the top: rebuild.
                heap[:] = self._counts
                heapq.heapify(heap)
            heapq.heappush(heap, position)
        self._counts[position] = count + 1
        self._size += 1

    def remove(self, position: Position) -> None:
        count = self._counts[position] - 1
        if count:
            self._counts[position] = count
        else:
            del self._counts[position]
        self._size -= 1

    def move(self, old: Position, new: Position) -> None:
        """``remove(old)`` and ``add(new)`` in one step (once per ack that moves a consumer)."""
        if old == new:
            return
        counts = self._counts
        count = counts.get(new, 0)
        if count == 0:
            self.add(new)
        else:
            counts[new] = count + 1
            self._size += 1
        count = counts[old] - 1
        if count:
            counts[old] = count
        else:
            del counts[old]
        self._size -= 1

    def move_many(self, old: Position, new: Position, n: int) -> None:
        """``move(old, new)`` ``n`` times: consumers read together move together."""
        if old == new or n <= 0:
            return
        counts = self._counts
        left = counts[old] - n
        if left < 0:
            raise ValueError(f"{n} moves from {old}, which is held {counts[old]} times")
        if left:
            counts[old] = left
        else:
            del counts[old]
        count = counts.get(new, 0)
        if count == 0:
            self._size -= 1
            self.add(new)
            count = 1
            n -= 1
        counts[new] = count + n
        # ``_size`` is unchanged: n positions left ``old`` and n arrived at ``new``.

    def lowest(self) -> Position | None:
        heap, counts = self._heap, self._counts
        while heap and heap[0] not in counts:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def clear(self) -> None:
        self._counts.clear()
        self._heap.clear()
        self._size = 0
