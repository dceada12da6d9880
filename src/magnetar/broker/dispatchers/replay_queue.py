"""Entries waiting to be sent again, in publish order."""

from __future__ import annotations

import bisect

from magnetar.storage.position import Position


class ReplayQueue:
    """Positions to send again, kept sorted so replays go out in publish order."""

    def __init__(self) -> None:
        self._sorted: list[Position] = []
        self._members: set[Position] = set()

    def __len__(self) -> int:
        return len(self._sorted)

    def add(self, position: Position) -> None:
        if position not in self._members:
            self._members.add(position)
            bisect.insort(self._sorted, position)

    def discard(self, position: Position) -> None:
        if position in self._members:
            self._members.remove(position)
            del self._sorted[bisect.bisect_left(self._sorted, position)]

    def pop_first(self, n: int) -> list[Position]:
        taken, self._sorted = self._sorted[:n], self._sorted[n:]
        self._members.difference_update(taken)
        return taken

    def discard_up_to(self, position: Position) -> None:
        """Forget every position up to ``position`` (it was acknowledged cumulatively)."""
        cut = bisect.bisect_right(self._sorted, position)
        if cut:
            self._members.difference_update(self._sorted[:cut])
            del self._sorted[:cut]

    def clear(self) -> None:
        self._sorted.clear()
        self._members.clear()
