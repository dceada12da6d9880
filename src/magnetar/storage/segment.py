"""One ledger on disk: an append-only log of records plus an index of their offsets.

Files are ``<ledger id, 20 digits>.log`` and ``.idx`` so ``ls`` lists ledgers in
order. The index holds one little-endian u64 per entry: the offset of its record
in the log. Only the log is fsynced by group commit; the index is derived data
that recovery checks against the log and repairs, and it is fsynced when the
ledger closes. The open ledger's offsets live in memory and reach its index file
``INDEX_BATCH`` at a time (and all on close): one write per entry would cost a
system call per message, and recovery rebuilds a lagging index tail by scanning
the log from the last indexed record.

Preallocation: an fdatasync after an append that grew the file must also commit
the new size and block allocation through the filesystem's journal; after an
overwrite of blocks already written and synced it flushes the data alone, at
about half the kernel time and latency on ext4. So a segment created with
``preallocate`` writes zeros that far ahead of its end before small appends reach
them, as BookKeeper's journal does; the group commit's next fsync makes them
durable. A step is never larger than the data already in the ledger (but at least
``PREALLOCATE_MIN_STEP``), so a broker with thousands of quiet topics does not
fill its disk with zeros: what a ledger holds in zeros is bounded by its own size.
A run of zeros is never a valid record (the checksum covers the length),
so recovery stops at the end of the real data and cuts the zeros off, and close
truncates them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from array import array
from pathlib import Path

from magnetar.storage.damage import Damage
from magnetar.storage.disk_space import is_out_of_space
from magnetar.storage.entry import EntryData
from magnetar.storage.errors import CorruptionError, MissingLedgerError, StorageClosedError
from magnetar.storage.record import HEADER_SIZE, encode_header, parse_records, record_end_at, scan_records
from magnetar.storage.salvage import all_zero, parse_span, save_aside, scan_log

LOG_SUFFIX = ".log"
#: Appends of entries above this share of the preallocation step just extend the
#: file: their fsyncs are dominated by their data, and zeroing ahead of them would
#: double the bytes written.
PREALLOCATE_MAX_SHARE = 64
#: The first steps of zeros in a fresh ledger; later steps grow with its data, up to ``preallocate``.
PREALLOCATE_MIN_STEP = 128 * 1024
#: Entries whose offsets are written to the index file together.
INDEX_BATCH = 256
INDEX_SUFFIX = ".idx"


def segment_paths(directory: Path, ledger_id: int) -> tuple[Path, Path]:
    stem = f"{ledger_id:020d}"
    return directory / (stem + LOG_SUFFIX), directory / (stem + INDEX_SUFFIX)


def delete_segment_files(directory: Path, ledger_id: int) -> None:
    for path in segment_paths(directory, ledger_id):
        path.unlink(missing_ok=True)


def fsync_directory(directory: Path) -> None:
    """Make a created or renamed file's directory entry survive power loss."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Segment:
    """The files of one ledger, open for appending (the current ledger) or for reading.

    Appends and reads come from the owner's thread; ``sync`` comes from the fsync
    thread. ``_sync_lock`` keeps ``close`` from closing a descriptor while an
    fsync is using it (a closed fd number could be reused by another file).
    """

    def __init__(
        self,
        ledger_id: int,
        log_fd: int,
        idx_fd: int,
        offsets: array[int],
        size: int,
        writable: bool,
        preallocate: int = 0,
    ):
        """Use ``create``, ``recover`` or ``open_read``; a read-only segment has no index fd (-1)."""
        self.ledger_id = ledger_id
        self._log_fd = log_fd
        self._idx_fd = idx_fd
        self._offsets = offsets
        self._size = size
        self._writable = writable
        self._closed = False
        self._sync_lock = threading.Lock()
        self.synced_entries = len(offsets) if not writable else 0
        #: Offsets already in the index file (the rest wait for ``INDEX_BATCH`` or close).
        self._indexed = len(offsets)
        #: The largest step of zeros written ahead of the data (0: none); the log file is zeros
        #: from the end of the data up to ``_zeroed``.
        self._preallocate = preallocate if writable else 0
        self._zeroed = size
        #: What opening found damaged (for the owner to log and count; it clears the list).
        self.damage: list[Damage] = []

    # ----------------------------------------------------------------- opening

    @classmethod
    def create(cls, directory: Path, ledger_id: int, preallocate: int = 0) -> Segment:
        log_path, idx_path = segment_paths(directory, ledger_id)
        log_fd, idx_fd = _open_pair(log_path, idx_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        fsync_directory(directory)
        return cls(ledger_id, log_fd, idx_fd, array("Q"), 0, writable=True, preallocate=preallocate)

    @classmethod
    def recover(cls, directory: Path, ledger_id: int, preallocate: int = 0) -> Segment:
        """Open the last ledger after a crash: keep every intact record, cut a torn tail.

        The index is trusted up to its longest plausible prefix whose last record
        checks out against the log (walking back while it does not); the log is
        then scanned forward from there, and whatever follows the last intact
        record is truncated.
        """
        log_path, idx_path = segment_paths(directory, ledger_id)
        existed = log_path.exists() and idx_path.exists()
        log_fd, idx_fd = _open_pair(log_path, idx_path, os.O_RDWR | os.O_CREAT)
        log_size = os.fstat(log_fd).st_size
        idx_bytes = _read_all(idx_fd)
        on_disk = _offsets_from(idx_bytes)
        offsets = array("Q", on_disk)
        indexed = _plausible_prefix(offsets, log_size)
        end = 0
        while indexed > 0:
            record_end = record_end_at(log_fd, offsets[indexed - 1], log_size)
            if record_end is not None:
                end = record_end
                break
            indexed -= 1
        del offsets[indexed:]
        scan = scan_log(log_fd, end, log_size)
        damage = [Damage(ledger_id, indexed + n, start, stop - start) for n, start, stop in scan.damaged]
        offsets.extend(scan.offsets)
        end = scan.end
        repaired = False
        lost = sum(1 for offset in on_disk[indexed:] if offset >= end)  # entries the index had past the data
        if end < log_size or lost:
            dropped = _cut_tail(log_fd, log_path, ledger_id, end, log_size, lost)
            if dropped is not None:
                damage.append(dropped)
            repaired = True
        if idx_bytes[indexed * 8 :] != _offsets_bytes(offsets[indexed:]):
            os.ftruncate(idx_fd, indexed * 8)
            os.pwrite(idx_fd, _offsets_bytes(offsets[indexed:]), indexed * 8)
            repaired = True
        if repaired:
            os.fdatasync(log_fd)
            os.fdatasync(idx_fd)
        if not existed:
            fsync_directory(directory)
        segment = cls(ledger_id, log_fd, idx_fd, offsets, end, writable=True, preallocate=preallocate)
        segment.synced_entries = len(offsets)
        segment.damage = damage
        return segment

    @classmethod
    def reopen(
        cls, directory: Path, ledger_id: int, offsets: array[int], size: int, preallocate: int = 0
    ) -> Segment:
        """Open again for appending a ledger this process closed (``close``) with every entry
        synced: its offsets and size are known, so nothing is read or scanned."""
        log_path, idx_path = segment_paths(directory, ledger_id)
        log_fd, idx_fd = _open_pair(log_path, idx_path, os.O_RDWR)
        segment = cls(ledger_id, log_fd, idx_fd, offsets, size, writable=True, preallocate=preallocate)
        segment.synced_entries = len(offsets)
        return segment

    @property
    def offsets(self) -> array[int]:
        """Each entry's offset in the log (for ``reopen``; not to be changed)."""
        return self._offsets

    @classmethod
    def open_read(cls, directory: Path, ledger_id: int, entries: int) -> Segment:
        """Open a closed ledger for reading; ``entries`` comes from the metadata store."""
        log_path, idx_path = segment_paths(directory, ledger_id)
        try:
            log_fd = os.open(log_path, os.O_RDONLY)
        except FileNotFoundError:
            raise MissingLedgerError(
                f"ledger {ledger_id}: segment file {log_path} is missing", ledger_id, entries
            ) from None
        size = os.fstat(log_fd).st_size
        try:
            offsets = _offsets_from(idx_path.read_bytes())
        except FileNotFoundError:
            offsets = array("Q")
        damage: list[Damage] = []
        data_end = size
        if _plausible_prefix(offsets, size) < entries:
            scan = scan_log(log_fd, 0, size)
            offsets = array("Q", scan.offsets)
            data_end = scan.end
            damage = [Damage(ledger_id, n, a, b - a) for n, a, b in scan.damaged if n < entries]
        if len(offsets) < entries:
            # The log lost its end after the ledger was closed: the entries that are gone read as
            # damaged (spans after the last intact record), so the others stay readable.
            damage += [Damage(ledger_id, n, data_end, 0) for n in range(len(offsets), entries)]
            offsets.extend([data_end] * (entries - len(offsets)))
        del offsets[entries:]
        if entries and len(offsets) == entries:
            # The data ends with the last entry, not at the file's end: a crash between the
            # ledger's close in the metadata and the truncation of its preallocated zeros.
            size = record_end_at(log_fd, offsets[-1], size) or size
        segment = cls(ledger_id, log_fd, -1, offsets, size, writable=False)
        segment.damage = damage
        return segment

    @classmethod
    def open_follow(cls, directory: Path, ledger_id: int) -> Segment:
        """Open a ledger that another process is appending to, for reading only (a follower,
        ``followed_ledger.py``): nothing is known of it until ``follow`` learns its records."""
        log_path, _ = segment_paths(directory, ledger_id)
        try:
            log_fd = os.open(log_path, os.O_RDONLY)
        except FileNotFoundError:
            raise MissingLedgerError(
                f"ledger {ledger_id}: segment file {log_path} is missing", ledger_id, 0
            ) from None
        return cls(ledger_id, log_fd, -1, array("Q"), 0, writable=False)

    def follow(self, entries: int) -> bool:
        """Learn where the records of the first ``entries`` entries lie, reading the log forward
        from the end of the last one known (the writer's index lags its log); True once they are
        all known. Only entries the writer made durable are asked for, so they are whole: the scan
        stops before anything after them (a record being written, preallocated zeros)."""
        if len(self._offsets) >= entries:
            return True
        if self._closed:
            raise StorageClosedError(f"ledger {self.ledger_id} is closed")
        file_size = os.fstat(self._log_fd).st_size
        for offset, end in scan_records(self._log_fd, self._size, file_size):
            self._offsets.append(offset)
            self._size = end
            if len(self._offsets) >= entries:
                return True
        return False

    # ------------------------------------------------------------------- state

    @property
    def entries(self) -> int:
        return len(self._offsets)

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ writes

    def append(self, data: EntryData) -> int:
        """Write one record to the OS (not yet fsynced) and return its entry id."""
        if self._closed or not self._writable:
            raise StorageClosedError(f"ledger {self.ledger_id} is not open for writing")
        header = encode_header(data)
        offset = self._size
        small = len(data) * PREALLOCATE_MAX_SHARE <= self._preallocate
        try:
            if small and self._preallocate and offset + HEADER_SIZE + len(data) > self._zeroed:
                self._zero_ahead_if_room(offset, min(self._preallocate, max(PREALLOCATE_MIN_STEP, offset)))
            _write_all(self._log_fd, header, data, offset)
        except OSError:
            self._cut_at(offset)  # a failed append (a full disk) leaves the ledger as it was
            raise
        entry_id = len(self._offsets)
        self._offsets.append(offset)
        self._size = offset + HEADER_SIZE + len(data)
        if entry_id + 1 - self._indexed >= INDEX_BATCH:
            with contextlib.suppress(OSError):  # derived data: the next batch or close writes it
                self._write_index()
        return entry_id

    def _cut_at(self, end: int) -> None:
        """Drop the bytes of a record that was only partly written (and any zeros ahead)."""
        os.ftruncate(self._log_fd, end)
        self._zeroed = end

    def truncate_to(self, entries: int) -> None:
        """Forget the entries from ``entries`` on, in memory and on disk (after a failed fsync,
        whose entries were never confirmed: they must not reappear once writes resume)."""
        if self._closed or not self._writable:
            raise StorageClosedError(f"ledger {self.ledger_id} is not open for writing")
        if entries >= len(self._offsets):
            return
        end = self._offsets[entries]
        del self._offsets[entries:]
        self._cut_at(end)
        self._size = end
        if self._indexed > entries:
            os.ftruncate(self._idx_fd, entries * 8)
            self._indexed = entries
        self.synced_entries = min(self.synced_entries, entries)

    def _zero_ahead_if_room(self, start: int, size: int) -> None:
        """``_zero_ahead``, which is only a speed-up: with no room for the zeros the record goes on
        alone, and this segment writes no more zeros (a disk that could not take a step of them
        has no room to spare). Without this, a disk with less room than one step but more than
        the write gate asks to resume refused every add while looking writable."""
        try:
            self._zero_ahead(start, size)
        except OSError as exc:
            if not is_out_of_space(exc):
                raise
            self._cut_at(start)
            self._preallocate = 0

    def _zero_ahead(self, start: int, size: int) -> None:
        """Write ``size`` bytes of zeros from ``start`` (the end of the data)."""
        chunks = [_ZEROS] * (size // len(_ZEROS))
        if size % len(_ZEROS):
            chunks.append(_ZEROS[: size % len(_ZEROS)])
        written = os.pwritev(self._log_fd, chunks, start)
        while written < size:  # a short write: the rest one chunk at a time
            written += os.pwrite(self._log_fd, _ZEROS[: min(len(_ZEROS), size - written)], start + written)
        self._zeroed = start + size

    def _write_index(self) -> None:
        """Write the offsets not yet in the index file (owner's thread, or close)."""
        start = self._indexed
        end = len(self._offsets)
        if end > start:
            os.pwrite(self._idx_fd, _offsets_bytes(self._offsets[start:end]), start * 8)
            self._indexed = end

    def sync(self) -> int:
        """fdatasync the log; returns how many fsyncs ran (0 once closed: close already synced)."""
        with self._sync_lock:
            if self._closed or not self._writable:
                return 0
            entries = len(self._offsets)
            os.fdatasync(self._log_fd)
            self.synced_entries = max(self.synced_entries, entries)
            return 1

    def close(self, sync: bool = True) -> int:
        """Close both files, fsyncing them first when writable; returns fsyncs run."""
        with self._sync_lock:
            if self._closed:
                return 0
            self._closed = True
            done = 0
            try:
                if self._writable:
                    self._write_index()
                    if self._zeroed > self._size:
                        os.ftruncate(self._log_fd, self._size)
                if sync and self._writable:
                    os.fdatasync(self._log_fd)
                    os.fdatasync(self._idx_fd)
                    self.synced_entries = len(self._offsets)
                    done = 2
            finally:
                os.close(self._log_fd)
                if self._idx_fd >= 0:
                    os.close(self._idx_fd)
            return done

    # ------------------------------------------------------------------- reads

    def entry_size(self, entry_id: int) -> int:
        end = self._offsets[entry_id + 1] if entry_id + 1 < len(self._offsets) else self._size
        return max(0, end - self._offsets[entry_id] - HEADER_SIZE)

    def read_range(
        self, first: int, count: int, max_bytes: int | None = None, at_least_one: bool = True
    ) -> list[memoryview]:
        """Read up to ``count`` entries from ``first`` with one pread, staying within ``max_bytes``.

        The entries are read-only views of the one buffer the pread filled (``parse_records``).
        """
        span = self._read_span(first, count, max_bytes, at_least_one)
        if span is None:
            return []
        buf, count = span
        try:
            return parse_records(buf, count)
        except ValueError as exc:
            last = first + count - 1
            raise CorruptionError(f"ledger {self.ledger_id} entries {first}..{last}: {exc}") from None

    def read_salvaging(
        self, first: int, count: int, max_bytes: int | None = None, at_least_one: bool = True
    ) -> list[memoryview | None]:
        """``read_range`` for a span that failed its checks: each record is delimited by the index,
        and a damaged one (its length or checksum does not match its span) is None."""
        span = self._read_span(first, count, max_bytes, at_least_one)
        if span is None:
            return []
        buf, count = span
        start = self._offsets[first]
        return parse_span(buf, [offset - start for offset in self._offsets[first : first + count]])

    def _read_span(
        self, first: int, count: int, max_bytes: int | None, at_least_one: bool
    ) -> tuple[bytes, int] | None:
        """The bytes of up to ``count`` records from ``first`` (one pread) and how many they are."""
        if self._closed:
            raise StorageClosedError(f"ledger {self.ledger_id} is closed")
        count = min(count, len(self._offsets) - first)
        if max_bytes is not None:
            count = self._fit(first, count, max_bytes, at_least_one)
        if count <= 0:
            return None
        start = self._offsets[first]
        last = first + count
        end = self._offsets[last] if last < len(self._offsets) else self._size
        return os.pread(self._log_fd, end - start, start), count

    def record_span(self, entry_id: int) -> tuple[int, int]:
        """Where entry ``entry_id``'s record lies in the log: ``(offset, size)``."""
        offset = self._offsets[entry_id]
        end = self._offsets[entry_id + 1] if entry_id + 1 < len(self._offsets) else self._size
        return offset, max(0, end - offset)

    def _fit(self, first: int, count: int, max_bytes: int, at_least_one: bool) -> int:
        total = 0
        for n in range(count):
            total += self.entry_size(first + n)
            if total > max_bytes:
                return 1 if n == 0 and at_least_one else n
        return count


def _cut_tail(
    log_fd: int, log_path: Path, ledger_id: int, end: int, log_size: int, indexed: int
) -> Damage | None:
    """Truncate the log at ``end``, keeping what is cut in a file next to it unless it is all zeros.

    Returns what was cut when it was more than preallocated zeros (data, or entries the index knew of).
    """
    tail = os.pread(log_fd, log_size - end, end)
    damage = None
    if not all_zero(tail) or indexed:
        # the zeros after the last non-zero byte are preallocation, not data: they are not kept
        saved = None if all_zero(tail) else str(save_aside(log_path, end, tail.rstrip(b"\0")))
        damage = Damage(ledger_id, None, end, len(tail), entries=indexed, saved_to=saved)
    os.ftruncate(log_fd, end)
    return damage


def _write_all(fd: int, header: bytes, data: EntryData, offset: int) -> None:
    written = os.pwritev(fd, [header, data], offset)
    if written == len(header) + len(data):
        return
    rest = memoryview(header + data)[written:]
    offset += written
    while rest:
        n = os.pwrite(fd, rest, offset)
        rest = rest[n:]
        offset += n


#: Preallocation writes this buffer over and over in one pwritev (at most 1024 times: IOV_MAX).
_ZEROS = bytes(64 * 1024)


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


def _offsets_from(raw: bytes) -> array[int]:
    offsets = array("Q")
    offsets.frombytes(raw[: len(raw) - len(raw) % 8])
    if sys.byteorder == "big":
        offsets.byteswap()
    return offsets


def index_bytes(offsets: array[int]) -> bytes:
    """An index file's bytes: each offset as a little-endian u64 (what an offloaded ledger's object
    ends with too)."""
    return _offsets_bytes(offsets)


def _offsets_bytes(offsets: array[int]) -> bytes:
    if sys.byteorder == "big":
        offsets = array("Q", offsets)
        offsets.byteswap()
    return offsets.tobytes()


def _plausible_prefix(offsets: array[int], log_size: int) -> int:
    """How many leading index entries could be real: start at 0, strictly increasing, inside the log."""
    previous = -HEADER_SIZE
    for n, offset in enumerate(offsets):
        if offset < previous + HEADER_SIZE or offset + HEADER_SIZE > log_size or (n == 0 and offset != 0):
            return n
        previous = offset
    return len(offsets)


def _open_pair(log_path: Path, idx_path: Path, flags: int) -> tuple[int, int]:
    """Open a segment's log and index files; if the second fails (out of descriptors...), the first
    is closed again rather than leaked."""
    log_fd = os.open(log_path, flags, 0o644)
    try:
        return log_fd, os.open(idx_path, flags, 0o644)
    except BaseException:
        os.close(log_fd)
        raise
