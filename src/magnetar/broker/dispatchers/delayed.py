"""Delayed delivery: entries whose ``deliver_at_time`` is in the future wait here.

Nothing is persisted: a held entry is unacknowledged, so after a restart the cursor reads
it again and it is held again until its time.
"""

from __future__ import annotations

import heapq

from magnetar.storage.position import Position


class DelayedDeliveryTracker:
    def __init__(self) -> None:
        self._heap: list[tuple[int, Position]] = []
        self._members: set[Position] = set()

    def __len__(self) -> int:
        return len(self._members)

    def add(self, position: Position, deliver_at_ms: int) -> None:
        if position not in self._members:
            self._members.add(position)
            heapq.heappush(self._heap, (deliver_at_ms, position))

    def discard(self, position: Position) -> None:
        # Lazy removal: skipped when popped.
        self._members.discard(position)

    def pop_due(self, now_ms: int) -> list[Position]:
        due = []
        while self._heap and self._heap[0][0] <= now_ms:
            _, position = heapq.heappop(self._heap)
            if position in self._members:
                self._members.remove(position)
                due.append(position)
        return due

    def next_time(self) -> int | None:
        while self._heap and self._heap[0][1] not in self._members:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def clear(self) -> None:
        self._heap.clear()
        self._members.clear()
