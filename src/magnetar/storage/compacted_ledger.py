"""A topic's compacted ledger: the entries compaction kept, each with its position in the topic.

Pulsar's compactor writes the kept messages to a BookKeeper ledger of their own; here it is one
segment file (``segment.py``'s records and index) under ``<managed ledger dir>/compacted/``, named
by an id from the store's ledger-id counter. Each record is ``[u64 ledger id][u64 entry id][entry]``:
readers get the original position back, so a compacted read hands out the original message ids.
The file is not in the managed ledger's ledger list, so retention never deletes it; deleting the
topic deletes its directory, and this file with it. Which compacted ledger is current is the
broker's record (the ``__compaction`` cursor's properties); a file it does not name is a
compaction that did not finish, or one replaced, and ``remove_unused`` deletes it.
"""

from __future__ import annotations

import bisect
import contextlib
import struct
from pathlib import Path

from magnetar.storage.entry import Entry, EntryData
from magnetar.storage.position import Position
from magnetar.storage.segment import Segment, delete_segment_files, fsync_directory, segment_paths

COMPACTED_DIR = "compacted"
_POSITION = struct.Struct(">QQ")
_READ_BATCH = 1024


def compacted_directory(ledger_directory: Path) -> Path:
    return ledger_directory / COMPACTED_DIR


class CompactedLedgerWriter:
    """Writes a new compacted ledger; ``finish`` makes it durable (log, index and directory
    fsynced), ``abort`` deletes what was written."""

    def __init__(self, ledger_directory: Path, ledger_id: int) -> None:
        self.directory = compacted_directory(ledger_directory)
        self.directory.mkdir(exist_ok=True)
        self.ledger_id = ledger_id
        self._segment = Segment.create(self.directory, ledger_id)
        self.bytes_written = 0

    def add(self, position: Position, data: EntryData) -> None:
        record = _POSITION.pack(position.ledger_id, position.entry_id) + bytes(data)
        self._segment.append(record)
        self.bytes_written += len(record)

    @property
    def entries(self) -> int:
        return self._segment.entries

    def finish(self) -> None:
        """Fsync the log and its index and close them: the ledger is durable when this returns."""
        self._segment.close(sync=True)
        fsync_directory(self.directory)

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self._segment.close(sync=False)
        delete_segment_files(self.directory, self.ledger_id)


class CompactedLedger:
    """A finished compacted ledger, open for reading: the original positions of its entries are
    read once on open (one entry per key: small next to the topic), then reads seek by position."""

    def __init__(self, ledger_directory: Path, ledger_id: int, entries: int) -> None:
        self.ledger_id = ledger_id
        self._segment = Segment.open_read(compacted_directory(ledger_directory), ledger_id, entries)
        self._positions: list[Position] = []
        for first in range(0, entries, _READ_BATCH):
            for record in self._segment.read_range(first, _READ_BATCH):
                self._positions.append(Position(*_POSITION.unpack_from(record)))

    @property
    def entries(self) -> int:
        return len(self._positions)

    @property
    def positions(self) -> list[Position]:
        """The original position of each entry, in order (not to be changed)."""
        return self._positions

    @property
    def size_bytes(self) -> int:
        return self._segment.size_bytes

    def read_from(self, start: Position, max_entries: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries whose original position is at or after ``start``, with those positions; at least
        one when there is any, at most ``max_entries`` and, past the first, ``max_bytes``."""
        first = bisect.bisect_left(self._positions, start)
        return self._read(first, max_entries, max_bytes)

    def entry_at(self, index: int) -> Entry:
        """The ``index``-th entry (0 the first), with its original position."""
        return self._read(index, 1, None)[0]

    def all_entries(self) -> list[Entry]:
        return self._read(0, len(self._positions), None)

    def _read(self, first: int, max_entries: int, max_bytes: int | None) -> list[Entry]:
        if first >= len(self._positions) or max_entries <= 0:
            return []
        records = self._segment.read_range(first, max_entries, max_bytes)
        return [
            Entry(self._positions[first + n], record[_POSITION.size :]) for n, record in enumerate(records)
        ]

    def close(self) -> None:
        self._segment.close(sync=False)


def delete_compacted_ledger(ledger_directory: Path, ledger_id: int) -> None:
    delete_segment_files(compacted_directory(ledger_directory), ledger_id)


def remove_unused(ledger_directory: Path, keep: int | None) -> list[int]:
    """Delete every compacted ledger but ``keep`` (one a crash left half written, or one replaced
    whose deletion did not happen); returns the ids deleted."""
    directory = compacted_directory(ledger_directory)
    if not directory.is_dir():
        return []
    doomed = sorted(
        {int(path.stem) for path in directory.iterdir() if path.stem.isdigit() and int(path.stem) != keep}
    )
    for ledger_id in doomed:
        delete_segment_files(directory, ledger_id)
    return doomed


def compacted_ledger_exists(ledger_directory: Path, ledger_id: int) -> bool:
    return segment_paths(compacted_directory(ledger_directory), ledger_id)[0].exists()
