"""Closed ledgers kept open for reading, a bounded number of them (least recently used first out)."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from magnetar.storage.segment import Segment


class SegmentReaders:
    """Closed ledgers open for reading; past ``max_open`` the least recently used is closed."""

    def __init__(self, directory: Path, max_open: int = 8):
        self._dir = directory
        self._max_open = max_open
        self._open: OrderedDict[int, Segment] = OrderedDict()

    @property
    def open_count(self) -> int:
        """Closed ledgers open for reading now (a descriptor each)."""
        return len(self._open)

    def get(self, ledger_id: int, entries: int) -> Segment:
        segment = self._open.get(ledger_id)
        if segment is not None:
            self._open.move_to_end(ledger_id)
            return segment
        segment = Segment.open_read(self._dir, ledger_id, entries)
        self._open[ledger_id] = segment
        if len(self._open) > self._max_open:
            self._open.popitem(last=False)[1].close()
        return segment

    def discard(self, ledger_id: int) -> None:
        segment = self._open.pop(ledger_id, None)
        if segment is not None:
            segment.close()

    def close_all(self) -> None:
        for segment in self._open.values():
            segment.close()
        self._open.clear()
