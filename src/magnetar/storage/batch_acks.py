"""Batch-index acknowledgments: which messages of a batch entry are still unacknowledged.

The client sends a Java ``BitSet`` as ``long[]``: word ``i`` holds bits
``64*i .. 64*i+63``, as a signed int64, and a set bit means "still unacked".
Acks only ever clear bits, so the state of an entry is the AND of every set it
was sent; once no bit is left the whole entry counts as deleted. Words are
kept unsigned in memory and converted back at the edges.
"""

from __future__ import annotations

from magnetar.storage.position import Position

_MASK64 = (1 << 64) - 1


def to_unsigned(words: list[int]) -> list[int]:
    return [w & _MASK64 for w in words]


def to_signed(words: list[int]) -> list[int]:
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def clip(words: list[int], batch_size: int) -> list[int]:
    """Unsigned words covering exactly ``batch_size`` bits: bits past the batch are dropped.

    A ``batch_size`` of 0 or less means unknown: the words are taken as they are.
    """
    words = to_unsigned(words)
    if batch_size <= 0:
        return words
    nwords = (batch_size + 63) // 64
    words = (words + [0] * nwords)[:nwords]
    tail_bits = batch_size % 64
    if tail_bits:
        words[-1] &= (1 << tail_bits) - 1
    return words


def intersect(a: list[int], b: list[int]) -> list[int]:
    """AND of two BitSets; a word missing from the shorter one is all zeros (all acked)."""
    return [x & y for x, y in zip(a, b, strict=False)]


class BatchAcks:
    """Still-unacked bits of every partially acknowledged batch entry of a cursor."""

    __slots__ = ("_sets",)

    def __init__(self) -> None:
        self._sets: dict[Position, list[int]] = {}

    def __len__(self) -> int:
        return len(self._sets)

    def get(self, position: Position) -> list[int] | None:
        return self._sets.get(position)

    def apply(self, position: Position, unacked: list[int], batch_size: int) -> tuple[bool, bool]:
        """AND ``unacked`` into the entry's set; returns ``(all acked, changed)``."""
        given = clip(unacked, batch_size)
        current = self._sets.get(position)
        merged = given if current is None else intersect(current, given)
        if not any(merged):
            self._sets.pop(position, None)
            return True, True
        if merged == current:
            return False, False
        self._sets[position] = merged
        return False, True

    def set(self, position: Position, words: list[int]) -> None:
        self._sets[position] = to_unsigned(words)

    def discard(self, position: Position) -> None:
        self._sets.pop(position, None)

    def remove_up_to(self, position: Position) -> None:
        for doomed in [p for p in self._sets if p <= position]:
            del self._sets[doomed]

    def remove_after(self, position: Position) -> bool:
        doomed = [p for p in self._sets if p > position]
        for p in doomed:
            del self._sets[p]
        return bool(doomed)

    def clear(self) -> None:
        self._sets.clear()

    def items(self) -> list[tuple[Position, list[int]]]:
        return sorted(self._sets.items())
