"""Per-consumer correctness, cheap enough for 100K consumers: four integers each, in arrays.

Each message carries its sequence number (0, 1, 2, ... from the producer). A consumer must see
them once each, in order: a number below the next one expected is a duplicate, a number above
it leaves a gap. Nothing per message is kept.
"""

from __future__ import annotations

from array import array


class Tally:
    """Counts for ``size`` consumers, indexed 0..size-1 within one worker."""

    __slots__ = ("complete", "duplicates", "expected", "gaps", "next_seq", "received")

    def __init__(self, size: int, expected: int) -> None:
        self.expected = expected
        self.received = array("q", bytes(8 * size))
        self.next_seq = array("q", bytes(8 * size))
        self.duplicates = array("q", bytes(8 * size))
        self.gaps = array("q", bytes(8 * size))  # messages skipped over (seq ahead of the next expected)
        self.complete = 0  # consumers whose next expected sequence reached ``expected``

    def record(self, index: int, seq: int) -> bool:
        """Count one receipt; True when it completes this consumer's share."""
        expected = self.next_seq[index]
        if seq < expected:
            self.duplicates[index] += 1
            return False
        if seq > expected:
            self.gaps[index] += seq - expected
        self.received[index] += 1
        self.next_seq[index] = seq + 1
        if seq + 1 == self.expected:
            self.complete += 1
            return True
        return False

    def summary(self) -> dict[str, int]:
        """Totals over this worker's consumers, and how many consumers got everything cleanly."""
        clean = sum(
            1
            for r, n, d, g in zip(self.received, self.next_seq, self.duplicates, self.gaps, strict=True)
            if r == self.expected and n == self.expected and d == 0 and g == 0
        )
        return {
            "consumers": len(self.received),
            "clean": clean,
            "deliveries": sum(self.received),
            "missing": sum(max(0, self.expected - r) for r in self.received),
            "duplicates": sum(self.duplicates),
            "gaps": sum(self.gaps),
            "incomplete": sum(1 for n in self.next_seq if n != self.expected),
        }
