"""An offloaded ledger read from the object store, as ``LedgerReader`` reads a local one.

Its object is the ledger's log (``size_bytes``, records as on disk) followed by its index (one
little-endian u64 offset per entry), so a run of entries is one range of the object: the index is
read once (through the read-ahead cache, like the data), then each read takes the span between
two offsets. Records carry their CRC as on disk and are checked the same way; a span that fails
is salvaged entry by entry (``read_salvaging``), as a local one is.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable

from magnetar.storage.damage import Damage
from magnetar.storage.errors import CorruptionError
from magnetar.storage.ledger_info import LedgerInfo
from magnetar.storage.record import HEADER_SIZE, parse_records
from magnetar.storage.salvage import parse_span
from magnetar.storage.tiered_reads import TieredReads


class OffloadedSegment:
    """A closed ledger whose only copy is an object (its local files were deleted after offload)."""

    def __init__(self, info: LedgerInfo, reads: TieredReads, on_ready: Callable[[], None] | None) -> None:
        assert info.offload is not None
        self.ledger_id = info.ledger_id
        self.key = info.offload.key
        self._object_size = info.offload.object_size
        self._size = info.size_bytes
        self._entries = info.entries
        self._reads = reads
        self._on_ready = on_ready
        self._offsets: array[int] | None = None
        #: What reading found damaged (for the owner to log and count; it clears the list).
        self.damage: list[Damage] = []

    def _read(self, start: int, end: int) -> bytes:
        return self._reads.read(self.key, self._object_size, start, end, self._on_ready)

    def offsets(self) -> array[int]:
        """Each entry's offset in the log part of the object (read once)."""
        if self._offsets is None:
            raw = self._read(self._size, self._size + 8 * self._entries)
            offsets = array("Q")
            offsets.frombytes(raw[: len(raw) - len(raw) % 8])
            if sys.byteorder == "big":
                offsets.byteswap()
            if len(offsets) != self._entries or any(o >= self._size for o in offsets[-1:]):
                raise CorruptionError(
                    f"offloaded ledger {self.ledger_id}: the index in {self.key} does not match the ledger"
                )
            self._offsets = offsets
        return self._offsets

    def entry_size(self, entry_id: int) -> int:
        offsets = self.offsets()
        end = offsets[entry_id + 1] if entry_id + 1 < len(offsets) else self._size
        return max(0, end - offsets[entry_id] - HEADER_SIZE)

    def record_span(self, entry_id: int) -> tuple[int, int]:
        offsets = self.offsets()
        end = offsets[entry_id + 1] if entry_id + 1 < len(offsets) else self._size
        return offsets[entry_id], max(0, end - offsets[entry_id])

    def read_range(
        self, first: int, count: int, max_bytes: int | None = None, at_least_one: bool = True
    ) -> list[memoryview]:
        """Up to ``count`` entries from ``first`` in one range read, within ``max_bytes``."""
        span = self._span(first, count, max_bytes, at_least_one)
        if span is None:
            return []
        buf, count = span
        try:
            return parse_records(buf, count)
        except ValueError as exc:
            raise CorruptionError(
                f"offloaded ledger {self.ledger_id} entries {first}..{first + count - 1}: {exc}"
            ) from None

    def read_salvaging(
        self, first: int, count: int, max_bytes: int | None = None, at_least_one: bool = True
    ) -> list[memoryview | None]:
        span = self._span(first, count, max_bytes, at_least_one)
        if span is None:
            return []
        buf, count = span
        offsets = self.offsets()
        start = offsets[first]
        return parse_span(buf, [offset - start for offset in offsets[first : first + count]])

    def _span(
        self, first: int, count: int, max_bytes: int | None, at_least_one: bool
    ) -> tuple[bytes, int] | None:
        offsets = self.offsets()
        count = min(count, len(offsets) - first)
        if max_bytes is not None:
            total = 0
            for n in range(count):
                total += self.entry_size(first + n)
                if total > max_bytes:
                    count = 1 if n == 0 and at_least_one else n
                    break
        if count <= 0:
            return None
        last = first + count
        end = offsets[last] if last < len(offsets) else self._size
        return self._read(offsets[first], end), count

    def close(self) -> None:
        """Nothing to close (no descriptor is held); kept for ``SegmentReaders``' sake."""
