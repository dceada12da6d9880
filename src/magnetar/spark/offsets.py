"""Offsets: pure arithmetic on ``{topic partition: index}`` maps (no Spark, no broker).

An offset is the broker's continuous per-partition message index (see docs/entry-metadata.md)
of the next message to read; a micro-batch reads ``[start, end)`` of each partition. A
partition whose first index is not known yet (it had no retained message when planned) holds
``EARLIEST``: it is read from its first message once one exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

EARLIEST = -2  # as in Kafka's JSON offsets
LATEST = -1


@dataclass(frozen=True, order=True)
class IndexRange:
    """Indexes ``[start, end)`` of one topic partition (its full name)."""

    topic: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def rate_limit(start: Mapping[str, int], latest: Mapping[str, int], max_rows: int) -> dict[str, int]:
    """End offsets that take at most ``max_rows`` indexes in all from ``[start, latest)``, shared
    in proportion to what each partition has (as Spark's Kafka source does), the remainder one
    each to partitions in name order: the result depends on the inputs alone."""
    available = {tp: latest[tp] - start[tp] for tp in latest}
    total = sum(available.values())
    if total <= max_rows:
        return dict(latest)
    taken = {tp: (max_rows * n) // total for tp, n in available.items()}
    left = max_rows - sum(taken.values())
    for tp in sorted(available):
        if left == 0:
            break
        if taken[tp] < available[tp]:
            taken[tp] += 1
            left -= 1
    return {tp: start[tp] + n for tp, n in taken.items()}


def split(ranges: list[IndexRange], max_per_range: int, min_ranges: int | None = None) -> list[IndexRange]:
    """Cut ranges into pieces of at most ``max_per_range`` indexes, and further (largest first)
    until there are ``min_ranges`` pieces when the data allows. Empty ranges are dropped."""
    pieces = [piece for r in ranges if r.size > 0 for piece in _cut(r, max_per_range)]
    if min_ranges:
        while len(pieces) < min_ranges:
            largest = max(pieces, key=lambda r: (r.size, r), default=None)
            if largest is None or largest.size < 2:
                break
            pieces.remove(largest)
            pieces.extend(_cut(largest, (largest.size + 1) // 2))
    return sorted(pieces)


def _cut(r: IndexRange, size: int) -> list[IndexRange]:
    return [IndexRange(r.topic, s, min(s + size, r.end)) for s in range(r.start, r.end, size)]
