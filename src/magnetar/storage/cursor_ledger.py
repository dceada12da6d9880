"""A cursor ledger: the segment (log + index) a durable cursor writes its pages and markers to.

Cursor ledgers live in ``<managed ledger dir>/cursors/`` under ids taken from
the store-wide ledger-id counter, so they are never reused. The segment format
and its tail recovery are the data ledgers' own (``segment.py``): every entry
is a crc32c-checked record, and a torn tail is cut off on open.

Next to each cursor ledger, ``<id>.name`` holds the name of the cursor it belongs to
(UTF-8, written and fsynced before the cursor ledger is used): the metadata store is
what says so, but ``magnetar repair`` reads it when the metadata was lost.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from array import array
from pathlib import Path

from magnetar.storage.ack_marker import Marker, is_marker
from magnetar.storage.ack_page import is_page
from magnetar.storage.damage import Damage
from magnetar.storage.entry import EntryData
from magnetar.storage.errors import CorruptionError, StorageClosedError
from magnetar.storage.ledger_files import OPEN_LEDGER_FILES, try_hold
from magnetar.storage.record import HEADER_SIZE
from magnetar.storage.segment import Segment, delete_segment_files, fsync_directory, segment_paths

log = logging.getLogger(__name__)

CURSORS_DIR = "cursors"
SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|idx)$")
NAME_SUFFIX = ".name"
#: Files an open cursor ledger holds: its log and its index.
FILES = 2


class CursorLedger:
    """One cursor ledger, open for appending.

    Its files may be closed while it is idle and synced, and are opened again when it is next
    written or read (``ledger_files``: few ledgers keep descriptors). Safe to use from
    more than one thread: each call holds the ledger's lock.
    """

    def __init__(self, directory: Path, segment: Segment):
        """Use ``create`` or ``open``."""
        self._dir = directory
        self._ledger_id = segment.ledger_id
        #: The open segment, or None while parked (files closed; ``_parked`` has its offsets and size).
        self._segment: Segment | None = segment
        self._parked: tuple[array[int], int] | None = None
        self._damage = segment.damage
        self._lock = threading.RLock()
        self._gone = False
        OPEN_LEDGER_FILES.opened(self, FILES)

    def __repr__(self) -> str:
        return f"CursorLedger({self.ledger_id}, entries={self.entries}, bytes={self.size_bytes})"

    @classmethod
    def create(cls, directory: Path, ledger_id: int, owner: str | None = None) -> CursorLedger:
        """A new, empty cursor ledger; ``owner`` (the cursor's name) is written next to it first."""
        if not directory.exists():
            # Cursors of one topic may be created at once on the broker's open threads: the
            # directory may appear between the look and the mkdir (then made by the other).
            directory.mkdir(exist_ok=True)
            fsync_directory(directory.parent)
        if owner is not None:
            write_owner(directory, ledger_id, owner)
        return cls(directory, Segment.create(directory, ledger_id))  # fsyncs the directory

    @classmethod
    def open(cls, directory: Path, ledger_id: int) -> CursorLedger:
        """Open an existing cursor ledger after a restart; a torn tail is cut off."""
        directory.mkdir(exist_ok=True)
        return cls(directory, Segment.recover(directory, ledger_id))

    @property
    def damage(self) -> list[Damage]:
        """What opening found damaged in this cursor ledger (a cut tail, entries past damage)."""
        return self._damage

    @property
    def ledger_id(self) -> int:
        return self._ledger_id

    @property
    def entries(self) -> int:
        with self._lock:
            segment, parked = self._segment, self._parked
            return segment.entries if segment is not None else len(parked[0]) if parked else 0

    @property
    def size_bytes(self) -> int:
        with self._lock:
            segment, parked = self._segment, self._parked
            return segment.size_bytes if segment is not None else parked[1] if parked else 0

    @property
    def files_open(self) -> bool:
        return self._segment is not None

    def _live(self) -> Segment:
        """The open segment, its files opened again if they were closed (call with the lock)."""
        segment = self._segment
        if segment is not None:
            OPEN_LEDGER_FILES.used(self)
            return segment
        if self._gone or self._parked is None:
            raise StorageClosedError(f"cursor ledger {self._ledger_id} is closed")
        offsets, size = self._parked
        segment = self._segment = Segment.reopen(self._dir, self._ledger_id, offsets, size)
        self._parked = None
        OPEN_LEDGER_FILES.opened(self, FILES)
        return segment

    def park(self) -> bool:
        """Close the files if nothing is unsynced and no other thread is using them; True when
        they are closed (or were)."""
        if not try_hold(self._lock):
            return False
        try:
            segment = self._segment
            if segment is None:
                return True
            if segment.synced_entries < segment.entries:
                return False
            segment.close(sync=False)  # the log is synced; the index is derived (rebuilt if lost)
            self._parked = (segment.offsets, segment.size_bytes)
            self._segment = None
            OPEN_LEDGER_FILES.closed(self)
            return True
        finally:
            self._lock.release()

    def append(self, data: EntryData) -> int:
        """Write one entry to the OS (not yet fsynced); returns its entry id."""
        with self._lock:
            return self._live().append(data)

    def read(self, entry_id: int) -> memoryview:
        """One entry's data, crc-checked; raises CorruptionError if it is damaged."""
        with self._lock:
            segment = self._live()
            if not 0 <= entry_id < segment.entries:
                raise CorruptionError(f"cursor ledger {self.ledger_id} has no entry {entry_id}")
            return segment.read_range(entry_id, 1)[0]

    def sync(self) -> int:
        with self._lock:
            segment = self._segment
            if segment is None:
                return 0  # parked only once synced
            OPEN_LEDGER_FILES.used(self)
            return segment.sync()

    def close(self) -> None:
        with self._lock:
            self._gone = True
            if self._segment is not None:
                self._segment.close()
                self._segment = None
            self._parked = None
        OPEN_LEDGER_FILES.closed(self)

    def delete(self) -> None:
        with self._lock:
            self._gone = True
            if self._segment is not None:
                self._segment.close(sync=False)
                self._segment = None
            self._parked = None
            delete_cursor_ledger_files(self._dir, self.ledger_id)
        OPEN_LEDGER_FILES.closed(self)

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


def cursor_ledger_paths(directory: Path, ledger_id: int) -> tuple[Path, Path, Path]:
    """The log, index and owner-name files of a cursor ledger."""
    log_path, idx_path = segment_paths(directory, ledger_id)
    return log_path, idx_path, directory / f"{ledger_id:020d}{NAME_SUFFIX}"


def delete_cursor_ledger_files(directory: Path, ledger_id: int) -> None:
    delete_segment_files(directory, ledger_id)
    cursor_ledger_paths(directory, ledger_id)[2].unlink(missing_ok=True)


def write_owner(directory: Path, ledger_id: int, owner: str) -> None:
    """Write (and fsync) the name of the cursor a cursor ledger belongs to."""
    fd = os.open(cursor_ledger_paths(directory, ledger_id)[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, owner.encode("utf-8", "surrogatepass"))
        os.fdatasync(fd)
    finally:
        os.close(fd)


def read_owner(directory: Path, ledger_id: int) -> str | None:
    """The name of the cursor a cursor ledger belongs to; None if it was not recorded."""
    try:
        return cursor_ledger_paths(directory, ledger_id)[2].read_bytes().decode("utf-8", "surrogatepass")
    except (OSError, UnicodeDecodeError):
        return None
