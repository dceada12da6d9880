"""Individually acknowledged entries, kept as sorted ranges of entry ids per ledger.

Grouping by ledger is deliberate: PIP 81 persists acknowledgment state as one
page per ledger, so each ledger's ``RangeSet`` can become one page without
reshaping anything in memory.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from magnetar.storage.position import Position


class RangeSet:
    """Disjoint, sorted, half-open ``[start, end)`` ranges of ints; adjacent ranges merge.

    Two parallel lists searched with bisect: membership is O(log n) and a
    consumer that acks in order keeps the whole set at one range.
    """

    __slots__ = ("_count", "_ends", "_starts")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._count = 0

    def __len__(self) -> int:
        """How many values the set holds (not how many ranges)."""
        return self._count

    def __contains__(self, value: int) -> bool:
        i = bisect_right(self._starts, value) - 1
        return i >= 0 and value < self._ends[i]

    def __bool__(self) -> bool:
        return bool(self._starts)

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends, strict=True))

    def add(self, value: int) -> bool:
        """Add one value; False if it was already there."""
        return self.add_range(value, value + 1) > 0

    def add_range(self, start: int, end: int) -> int:
        """Add ``[start, end)``; returns how many values were new."""
        if start >= end:
            return 0
        lo = bisect_left(self._ends, start)  # first range ending at or after start: touches or overlaps
        hi = bisect_right(self._starts, end)  # ranges before hi start at or before end
        before = sum(e - s for s, e in zip(self._starts[lo:hi], self._ends[lo:hi], strict=True))
        if lo < hi:
            start = min(start, self._starts[lo])
            end = max(end, self._ends[hi - 1])
        self._starts[lo:hi] = [start]
        self._ends[lo:hi] = [end]
        new = (end - start) - before
        self._count += new
        return new

    def run_end(self, value: int) -> int:
        """End (exclusive) of the range holding ``value``; ``value`` itself when absent."""
        i = bisect_right(self._starts, value) - 1
        return self._ends[i] if i >= 0 and value < self._ends[i] else value

    def next_at_or_after(self, value: int) -> int | None:
        """The smallest member >= ``value``."""
        i = bisect_right(self._ends, value)
        if i == len(self._starts):
            return None
        return max(self._starts[i], value)

    def remove_below(self, value: int) -> None:
        """Drop every member < ``value``."""
        cut = bisect_right(self._ends, value)
        self._count -= sum(e - s for s, e in zip(self._starts[:cut], self._ends[:cut], strict=True))
        del self._starts[:cut]
        del self._ends[:cut]
        if self._starts and self._starts[0] < value:
            self._count -= value - self._starts[0]
            self._starts[0] = value

    def remove_from(self, value: int) -> int:
        """Drop every member >= ``value``; returns how many went."""
        cut = bisect_left(self._starts, value)
        removed = sum(e - s for s, e in zip(self._starts[cut:], self._ends[cut:], strict=True))
        del self._starts[cut:]
        del self._ends[cut:]
        if self._ends and self._ends[-1] > value:
            removed += self._ends[-1] - value
            self._ends[-1] = value
        self._count -= removed
        return removed

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
        self._count = 0


class AckRanges:
    """Individually deleted positions after the mark-delete position, one ``RangeSet`` per ledger."""

    __slots__ = ("_by_ledger",)

    def __init__(self) -> None:
        self._by_ledger: dict[int, RangeSet] = {}

    def __len__(self) -> int:
        return sum(len(ranges) for ranges in self._by_ledger.values())

    def __contains__(self, position: Position) -> bool:
        ranges = self._by_ledger.get(position.ledger_id)
        return ranges is not None and position.entry_id in ranges

    def ledger_ids(self) -> list[int]:
        return sorted(self._by_ledger)

    def ledger(self, ledger_id: int) -> RangeSet | None:
        """One ledger's ranges: the unit a PIP 81 page will hold."""
        return self._by_ledger.get(ledger_id)

    def add(self, position: Position) -> bool:
        return self.add_range(position.ledger_id, position.entry_id, position.entry_id + 1) > 0

    def add_range(self, ledger_id: int, start: int, end: int) -> int:
        ranges = self._by_ledger.get(ledger_id)
        if ranges is None:
            ranges = self._by_ledger[ledger_id] = RangeSet()
        return ranges.add_range(start, end)

    def run_end(self, position: Position) -> int:
        """End (exclusive entry id) of the acked run holding ``position``; its own id when not acked."""
        ranges = self._by_ledger.get(position.ledger_id)
        return position.entry_id if ranges is None else ranges.run_end(position.entry_id)

    def next_acked_in_ledger(self, position: Position) -> int | None:
        """The first acked entry id at or after ``position`` within its ledger."""
        ranges = self._by_ledger.get(position.ledger_id)
        return None if ranges is None else ranges.next_at_or_after(position.entry_id)

    def remove_up_to(self, position: Position) -> None:
        """Drop everything <= ``position`` (it is covered by the mark-delete position now)."""
        for ledger_id in [lid for lid in self._by_ledger if lid <= position.ledger_id]:
            ranges = self._by_ledger[ledger_id]
            if ledger_id < position.ledger_id:
                ranges.clear()
            else:
                ranges.remove_below(position.entry_id + 1)
            if not ranges:
                del self._by_ledger[ledger_id]

    def remove_after(self, position: Position) -> bool:
        """Drop everything > ``position``; True if anything went."""
        removed = 0
        for ledger_id in [lid for lid in self._by_ledger if lid >= position.ledger_id]:
            ranges = self._by_ledger[ledger_id]
            if ledger_id > position.ledger_id:
                removed += len(ranges)
                ranges.clear()
            else:
                removed += ranges.remove_from(position.entry_id + 1)
            if not ranges:
                del self._by_ledger[ledger_id]
        return removed > 0

    def clear(self) -> None:
        self._by_ledger.clear()

    def triples(self) -> Iterator[tuple[int, int, int]]:
        """``(ledger_id, start, end)`` for every range, in position order."""
        for ledger_id in sorted(self._by_ledger):
            for start, end in self._by_ledger[ledger_id].ranges():
                yield ledger_id, start, end
