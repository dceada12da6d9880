"""A cursor ledger: the segment (log + index) a durable cursor writes its pages and markers to.

Cursor ledgers live in ``<managed ledger dir>/cursors/`` under ids taken from
the store-wide ledger-id counter, so they are never reused. The segment format
and its tail recovery are the data ledgers' own (``segment.py``): every entry
is a crc32c-checked record, and a torn tail is cut off on open.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from magnetar.storage.ack_marker import Marker, is_marker
from magnetar.storage.ack_page import is_page
from magnetar.storage.damage import Damage
from magnetar.storage.errors import CorruptionError
from magnetar.storage.record import HEADER_SIZE
from magnetar.storage.segment import Segment, delete_segment_files, fsync_directory

log = logging.getLogger(__name__)

CURSORS_DIR = "cursors"
SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|idx)$")


class CursorLedger:
    """One cursor ledger, open for appending."""

    def __init__(self, directory: Path, segment: Segment):
        """Use ``create`` or ``open``."""
        self._dir = directory
        self._segment = segment

    def __repr__(self) -> str:
        return f"CursorLedger({self.ledger_id}, entries={self.entries}, bytes={self.size_bytes})"

    @classmethod
    def create(cls, directory: Path, ledger_id: int) -> CursorLedger:
        if not directory.exists():
            directory.mkdir()
            fsync_directory(directory.parent)
        return cls(directory, Segment.create(directory, ledger_id))

    @classmethod
    def open(cls, directory: Path, ledger_id: int) -> CursorLedger:
        """Open an existing cursor ledger after a restart; a torn tail is cut off."""
        directory.mkdir(exist_ok=True)
        return cls(directory, Segment.recover(directory, ledger_id))

    @property
    def damage(self) -> list[Damage]:
        """What opening found damaged in this cursor ledger (a cut tail, entries past damage)."""
        return self._segment.damage

    @property
    def ledger_id(self) -> int:
        return self._segment.ledger_id

    @property
    def entries(self) -> int:
        return self._segment.entries

    @property
    def size_bytes(self) -> int:
        return self._segment.size_bytes

    def append(self, data: bytes) -> int:
        """Write one entry to the OS (not yet fsynced); returns its entry id."""
        return self._segment.append(data)

    def read(self, entry_id: int) -> bytes:
        """One entry's data, crc-checked; raises CorruptionError if it is damaged."""
        if not 0 <= entry_id < self._segment.entries:
            raise CorruptionError(f"cursor ledger {self.ledger_id} has no entry {entry_id}")
        return self._segment.read_range(entry_id, 1)[0]

    def sync(self) -> int:
        return self._segment.sync()

    def close(self) -> None:
        self._segment.close()

    def delete(self) -> None:
        self._segment.close(sync=False)
        delete_segment_files(self._dir, self.ledger_id)

    # ---------------------------------------------------------------- recovery

    def last_valid_marker(self) -> tuple[int, Marker] | None:
        """The newest marker that is intact and whose new pages are intact, reading backwards.

        A marker counts only if every page it points at comes before it, and
        every page written since the marker before it (not yet covered by an
        earlier flush's fsync) reads back with a good checksum: a crash during a
        flush can leave the marker on disk but not a page it points at.
        """
        entry_id = self.entries - 1
        while entry_id >= 0:
            marker = self._marker_at(entry_id)
            if marker is not None and self._pages_intact(entry_id, marker):
                return entry_id, marker
            entry_id -= 1
        return None

    def _marker_at(self, entry_id: int) -> Marker | None:
        try:
            data = self.read(entry_id)
        except CorruptionError:
            return None
        if not is_marker(data):
            return None
        try:
            return Marker.decode(data)
        except ValueError as exc:
            log.warning("cursor ledger %d: marker at entry %d skipped: %s", self.ledger_id, entry_id, exc)
            return None

    def _pages_intact(self, marker_entry: int, marker: Marker) -> bool:
        for page in marker.pages:
            if not 0 <= page.entry_id < marker_entry:
                return False
            if page.entry_id <= marker.previous:
                continue  # fsynced by the flush that wrote the previous marker
            try:
                data = self.read(page.entry_id)
            except CorruptionError:
                log.warning(
                    "cursor ledger %d: marker at entry %d skipped: page %d is damaged",
                    self.ledger_id,
                    marker_entry,
                    page.entry_id,
                )
                return False
            if not is_page(data) or len(data) != page.size:
                return False
        return True


def record_bytes(data_size: int) -> int:
    """Bytes an entry of ``data_size`` takes in the log (record header included)."""
    return HEADER_SIZE + data_size


def cursor_ledger_ids(directory: Path) -> set[int]:
    """Ids of the cursor-ledger files under ``directory``."""
    if not directory.exists():
        return set()
    return {int(m.group(1)) for p in directory.iterdir() if (m := SEGMENT_FILE.match(p.name))}
