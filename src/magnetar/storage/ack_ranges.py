"""Individually acknowledged entry ids of one ledger, kept as sorted half-open ranges.

The ranges live in two ``array('q')`` columns (16 bytes a range, no object per
number), so a page's memory is known exactly and a ledger with 100,000 holes
costs 1.6 MB rather than the ~7 MB two lists of ints would.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left, bisect_right
from operator import ge

_ARRAY_HEADER = sys.getsizeof(array("q"))


class RangeSet:
    """Disjoint, sorted, half-open ``[start, end)`` ranges of ints; adjacent ranges merge.

    Membership is a bisect, O(log n). A consumer that acks in order keeps the
    whole set at one range.
    """

    __slots__ = ("_count", "_ends", "_starts")

    def __init__(self) -> None:
        self._starts = array("q")
        self._ends = array("q")
        self._count = 0

    @classmethod
    def from_arrays(cls, starts: array[int], ends: array[int]) -> RangeSet:
        """Adopt two columns; they must already be sorted, disjoint and non-adjacent (checked)."""
        if len(starts) != len(ends):
            raise ValueError("starts and ends differ in length")
        if any(map(ge, starts, ends)):
            raise ValueError("empty or inverted range")
        if any(map(ge, ends, starts[1:])):
            raise ValueError("ranges overlap, touch or are out of order")
        ranges = cls()
        ranges._starts = starts
        ranges._ends = ends
        ranges._count = sum(ends) - sum(starts)
        return ranges

    def __len__(self) -> int:
        """How many values the set holds (not how many ranges)."""
        return self._count

    def __contains__(self, value: int) -> bool:
        i = bisect_right(self._starts, value) - 1
        return i >= 0 and value < self._ends[i]

    def __bool__(self) -> bool:
        return bool(self._starts)

    @property
    def range_count(self) -> int:
        return len(self._starts)

    def columns(self) -> tuple[array[int], array[int]]:
        """The ``starts`` and ``ends`` arrays themselves (read-only use)."""
        return self._starts, self._ends

    def memory_bytes(self) -> int:
        """Bytes held by the two arrays, over-allocation included."""
        return sys.getsizeof(self._starts) + sys.getsizeof(self._ends) - 2 * _ARRAY_HEADER

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends, strict=True))

    def add(self, value: int) -> bool:
        """Add one value; False if it was already there."""
        return self.add_range(value, value + 1) > 0

    def add_range(self, start: int, end: int) -> int:
        """Add ``[start, end)``; returns how many values were new."""
        if start >= end:
            return 0
        starts, ends = self._starts, self._ends
        lo = bisect_left(ends, start)  # first range ending at or after start: touches or overlaps
        hi = bisect_right(starts, end)  # ranges before hi start at or before end
        if lo == hi:
            starts.insert(lo, start)
            ends.insert(lo, end)
            self._count += end - start
            return end - start
        before = sum(ends[lo:hi]) - sum(starts[lo:hi])
        start = min(start, starts[lo])
        end = max(end, ends[hi - 1])
        if hi - lo == 1:
            starts[lo] = start
            ends[lo] = end
        else:
            starts[lo:hi] = array("q", (start,))
            ends[lo:hi] = array("q", (end,))
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

    def remove_below(self, value: int) -> int:
        """Drop every member < ``value``; returns how many went."""
        starts, ends = self._starts, self._ends
        cut = bisect_right(ends, value)
        removed = 0
        if cut:
            removed = sum(ends[:cut]) - sum(starts[:cut])
            del starts[:cut]
            del ends[:cut]
        if starts and starts[0] < value:
            removed += value - starts[0]
            starts[0] = value
        self._count -= removed
        return removed

    def remove_from(self, value: int) -> int:
        """Drop every member >= ``value``; returns how many went."""
        starts, ends = self._starts, self._ends
        cut = bisect_left(starts, value)
        removed = 0
        if cut < len(starts):
            removed = sum(ends[cut:]) - sum(starts[cut:])
            del starts[cut:]
            del ends[cut:]
        if ends and ends[-1] > value:
            removed += ends[-1] - value
            ends[-1] = value
        self._count -= removed
        return removed

    def clear(self) -> None:
        self._starts = array("q")
        self._ends = array("q")
        self._count = 0
