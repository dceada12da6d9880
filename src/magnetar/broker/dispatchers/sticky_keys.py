"""Key_Shared's pure parts: the sticky key of an entry, its hash, and who owns each hash.

The hash is Pulsar's: Murmur3 (x86, 32 bit, seed 0) of the ordering key, else the
partition key, else ``NONE_KEY``; masked to a positive int and taken modulo 65536.
So a key lands in the same hash slot as it would on Pulsar.
"""

from __future__ import annotations

import base64
import bisect
import itertools
from typing import Generic, TypeVar

import mmh3

from magnetar.protocol import wire

RANGE_SIZE = 1 << 16
NONE_KEY = b"NONE_KEY"

C = TypeVar("C")


def sticky_key(metadata: wire.MessageMetadata | None) -> bytes:
    if metadata is None:
        return NONE_KEY
    if metadata.HasField("ordering_key"):
        return metadata.ordering_key
    if metadata.HasField("partition_key"):
        if metadata.partition_key_b64_encoded:
            return base64.b64decode(metadata.partition_key)
        return metadata.partition_key.encode()
    return NONE_KEY


def sticky_key_hash(key: bytes) -> int:
    return (mmh3.hash(key, 0, signed=False) & 0x7FFFFFFF) % RANGE_SIZE


class RangeConflict(ValueError):
    pass


class AutoSplitSelector(Generic[C]):
    """AUTO_SPLIT: consumers share 0..65535; a newcomer takes half of the largest range,
    a leaver's range goes back to the neighbour below it. Ranges are kept as sorted inclusive ends."""

    def __init__(self) -> None:
        self._ends: list[int] = []  # inclusive upper bound of each range, ascending
        self._owners: list[C] = []

    def add(self, consumer: C) -> None:
        if not self._ends:
            self._ends, self._owners = [RANGE_SIZE - 1], [consumer]
            return
        i = max(range(len(self._ends)), key=self._width)
        start = self._ends[i - 1] + 1 if i else 0
        width = self._ends[i] - start + 1
        if width < 2:
            raise RangeConflict("no hash range left to split for a new consumer")
        mid = start + width // 2 - 1
        # The existing owner keeps the lower half, the newcomer takes the upper one.
        self._ends.insert(i, mid)
        self._owners.insert(i + 1, consumer)

    def _width(self, i: int) -> int:
        start = self._ends[i - 1] + 1 if i else 0
        return self._ends[i] - start + 1

    def remove(self, consumer: C) -> None:
        for i, owner in enumerate(self._owners):
            if owner is consumer:
                del self._owners[i]
                if len(self._ends) == 1:
                    self._ends = []
                elif i == 0:
                    del self._ends[0]  # the first range goes to the next consumer up
                else:
                    del self._ends[i - 1]  # the neighbour below grows over it (undoing its split)
                return

    def select(self, key_hash: int) -> C | None:
        if not self._ends:
            return None
        return self._owners[bisect.bisect_left(self._ends, key_hash)]

    def ranges(self) -> list[tuple[int, int, C]]:
        out, start = [], 0
        for end, owner in zip(self._ends, self._owners, strict=True):
            out.append((start, end, owner))
            start = end + 1
        return out


class StickySelector(Generic[C]):
    """STICKY: each consumer declares its hash ranges; overlaps are refused; hashes in no
    range wait until a consumer claims them."""

    def __init__(self) -> None:
        self._ranges: list[tuple[int, int, C]] = []  # sorted by start

    def add(self, consumer: C, ranges: list[tuple[int, int]]) -> None:
        if not ranges:
            raise RangeConflict("a STICKY Key_Shared consumer must declare hash ranges")
        new = sorted(ranges)
        for start, end in new:
            if not 0 <= start <= end < RANGE_SIZE:
                raise RangeConflict(f"hash range [{start}, {end}] is outside 0..{RANGE_SIZE - 1}")
        for (s1, e1), (s2, _) in itertools.pairwise(new):
            if s2 <= e1:
                raise RangeConflict(f"hash ranges [{s1}, {e1}] and [{s2}, ...] overlap")
        for start, end in new:
            for s, e, _owner in self._ranges:
                if start <= e and s <= end:
                    raise RangeConflict(
                        f"hash range [{start}, {end}] overlaps [{s}, {e}] of another consumer"
                    )
        self._ranges = sorted(self._ranges + [(s, e, consumer) for s, e in new], key=lambda r: r[0])

    def remove(self, consumer: C) -> None:
        self._ranges = [r for r in self._ranges if r[2] is not consumer]

    def select(self, key_hash: int) -> C | None:
        i = bisect.bisect_right([r[0] for r in self._ranges], key_hash) - 1
        if i >= 0:
            start, end, owner = self._ranges[i]
            if start <= key_hash <= end:
                return owner
        return None

    def ranges(self) -> list[tuple[int, int, C]]:
        return list(self._ranges)
