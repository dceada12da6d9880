"""Batch-index acknowledgments: which messages of a batch entry are still unacknowledged.

The client sends a Java ``BitSet`` as ``long[]``: word ``i`` holds bits
``64*i .. 64*i+63``, as a signed int64, and a set bit means "still unacked".
Acks only ever clear bits, so the state of an entry is the AND of every set it
was sent; once no bit is left the whole entry counts as deleted. Words are
kept unsigned in memory and converted back at the edges. The sets themselves
live in each ledger's ``AckPage``.
"""

from __future__ import annotations

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
