"""One data ledger's acknowledgment state, and its stored form: a *page* of the cursor ledger (PIP 81).

A page holds the individually deleted entry ids of one ledger (a ``RangeSet``)
and the still-unacked bits of that ledger's partly acknowledged batch entries.
It is the unit that is written, swapped out and swapped back in.

Stored form (``encode``)::

    b"MgP1"  [u8 codec][body, zstd-compressed unless that is not smaller]
    body:  varint ledger_id
           varint n_ranges, then two columns of n_ranges numbers:
               gap    start[i] - end[i-1]   (end[-1] = 0)
               length end[i] - start[i]
           varint n_batches, then columns of n_batches numbers:
               entry id delta (from the previous batch entry, the first from 0)
               word count
           and the words themselves, u64 little-endian, entry after entry

Columns are described in ``ack_codec``. The record around the page carries a
crc32c, so a page is never trusted after a torn write.
"""

from __future__ import annotations

import sys
from array import array
from itertools import accumulate, chain
from operator import sub

from magnetar.storage.ack_codec import compress, decompress, get_column, get_varint, put_column, put_varint
from magnetar.storage.ack_ranges import RangeSet
from magnetar.storage.batch_acks import clip, intersect

PAGE_TAG = b"MgP1"
PAGE_OVERHEAD_BYTES = 400  # the page, its RangeSet, dict and bookkeeping
BATCH_ENTRY_BYTES = 100  # a dict slot, the key and the list
BATCH_WORD_BYTES = 44  # a pointer and an int of up to 64 bits
_BIG_ENDIAN = sys.byteorder == "big"


def is_page(data: bytes | memoryview) -> bool:
    return data[:4] == PAGE_TAG


class AckPage:
    """Acked entry ids and partial batch acks of one ledger."""

    __slots__ = ("_batch_words", "batches", "ledger_id", "ranges")

    def __init__(
        self, ledger_id: int, ranges: RangeSet | None = None, batches: dict[int, list[int]] | None = None
    ):
        self.ledger_id = ledger_id
        self.ranges = RangeSet() if ranges is None else ranges
        self.batches: dict[int, list[int]] = {} if batches is None else batches
        self._batch_words = sum(len(words) for words in self.batches.values())

    def __repr__(self) -> str:
        return (
            f"AckPage(ledger={self.ledger_id}, acked={len(self.ranges)},"
            f" ranges={self.ranges.range_count}, batches={len(self.batches)})"
        )

    def __bool__(self) -> bool:
        return bool(self.ranges) or bool(self.batches)

    def span(self) -> tuple[int, int]:
        """First and last entry id with any state (acked, or a partial batch); the page must not be empty."""
        starts, ends = self.ranges.columns()
        firsts = [starts[0]] if len(starts) else []
        lasts = [ends[-1] - 1] if len(ends) else []
        if self.batches:
            firsts.append(min(self.batches))
            lasts.append(max(self.batches))
        return min(firsts), max(lasts)

    def memory_bytes(self) -> int:
        return (
            PAGE_OVERHEAD_BYTES
            + self.ranges.memory_bytes()
            + BATCH_ENTRY_BYTES * len(self.batches)
            + BATCH_WORD_BYTES * self._batch_words
        )

    # ------------------------------------------------------------------- acks

    def add(self, entry_id: int) -> bool:
        """Individually delete ``entry_id``; False if it already was."""
        self._drop_batch(entry_id)
        return self.ranges.add(entry_id)

    def add_range(self, start: int, end: int) -> int:
        for entry_id in [e for e in self.batches if start <= e < end]:
            self._drop_batch(entry_id)
        return self.ranges.add_range(start, end)

    def batch(self, entry_id: int) -> list[int] | None:
        return self.batches.get(entry_id)

    def set_batch(self, entry_id: int, unsigned_words: list[int]) -> None:
        self._drop_batch(entry_id)
        self.batches[entry_id] = unsigned_words
        self._batch_words += len(unsigned_words)

    def apply_batch(self, entry_id: int, unacked: list[int], batch_size: int) -> tuple[bool, bool]:
        """AND ``unacked`` into the entry's set; returns ``(all acked, changed)``.

        Once no bit is left the set is dropped; the caller then deletes the entry.
        """
        given = clip(unacked, batch_size)
        current = self.batches.get(entry_id)
        merged = given if current is None else intersect(current, given)
        if not any(merged):
            self._drop_batch(entry_id)
            return True, True
        if merged == current:
            return False, False
        self.set_batch(entry_id, merged)
        return False, True

    def remove_up_to(self, entry_id: int) -> bool:
        """Forget everything <= ``entry_id``; True if anything went."""
        removed = self.ranges.remove_below(entry_id + 1) > 0
        for doomed in [e for e in self.batches if e <= entry_id]:
            self._drop_batch(doomed)
            removed = True
        return removed

    def remove_after(self, entry_id: int) -> bool:
        """Forget everything > ``entry_id``; True if anything went."""
        removed = self.ranges.remove_from(entry_id + 1) > 0
        for doomed in [e for e in self.batches if e > entry_id]:
            self._drop_batch(doomed)
            removed = True
        return removed

    def _drop_batch(self, entry_id: int) -> None:
        words = self.batches.pop(entry_id, None)
        if words is not None:
            self._batch_words -= len(words)

    # ----------------------------------------------------------------- format

    def encode(self) -> bytes:
        body = bytearray()
        put_varint(body, self.ledger_id)
        starts, ends = self.ranges.columns()
        put_varint(body, len(starts))
        if len(starts):
            put_column(body, array("q", map(sub, starts, chain((0,), ends))))
            put_column(body, array("q", map(sub, ends, starts)))
        entry_ids = sorted(self.batches)
        put_varint(body, len(entry_ids))
        if entry_ids:
            put_column(body, array("q", map(sub, entry_ids, chain((0,), entry_ids))))
            put_column(body, array("q", (len(self.batches[e]) for e in entry_ids)))
            words = array("Q", chain.from_iterable(self.batches[e] for e in entry_ids))
            if _BIG_ENDIAN:
                words.byteswap()
            body += words.tobytes()
        return PAGE_TAG + compress(body)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> AckPage:
        """Parse a page; raises ValueError when it is not a well-formed page."""
        if not is_page(data):
            raise ValueError("not a page entry")
        body = decompress(memoryview(data)[len(PAGE_TAG) :])
        ledger_id, pos = get_varint(body, 0)
        count, pos = get_varint(body, pos)
        ranges = RangeSet()
        if count:
            gaps, pos = get_column(body, pos, count)
            lengths, pos = get_column(body, pos, count)
            bounds = array("q", bytes(16 * count))
            bounds[0::2] = gaps
            bounds[1::2] = lengths
            bounds = array("q", accumulate(bounds))
            ranges = RangeSet.from_arrays(bounds[0::2], bounds[1::2])
        nbatches, pos = get_varint(body, pos)
        batches: dict[int, list[int]] = {}
        if nbatches:
            deltas, pos = get_column(body, pos, nbatches)
            counts, pos = get_column(body, pos, nbatches)
            if 0 in deltas[1:]:
                raise ValueError("batch entries repeat")
            total = sum(counts)
            if pos + 8 * total > len(body):
                raise ValueError("batch words run past the end")
            words = array("Q")
            words.frombytes(body[pos : pos + 8 * total])
            if _BIG_ENDIAN:
                words.byteswap()
            pos += 8 * total
            at = 0
            for entry_id, n in zip(accumulate(deltas), counts, strict=True):
                batches[entry_id] = words[at : at + n].tolist()
                at += n
        if pos != len(body):
            raise ValueError("trailing bytes after the page")
        return cls(ledger_id, ranges, batches)
