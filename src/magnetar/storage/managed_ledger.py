"""ManagedLedger: one topic's log, a sequence of ledgers with cursors over it.

Here are adds, rollover, group-commit rounds, positions, trimming and closing; the ledger list is
rebuilt on open by ``ledger_recovery.py``, the cursors are ``cursor_container.py``'s, whether adds
are accepted is ``write_gate.py``'s, reads (salvaging damaged spans) ``ledger_reads.py``'s; where
each ledger lives (local files, an object in the object store, both) is in its ``LedgerInfo``, and
offloaded ledgers are read through ``tiered_reads.py`` (docs/tiered-storage.md).
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from magnetar.storage.callbacks import DurableCallback, Notify, dispatch
from magnetar.storage.config import StorageConfig
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.cursor_container import ManagedCursorContainer
from magnetar.storage.damage import Damage, DamageLog
from magnetar.storage.disk_space import DiskSpace
from magnetar.storage.entry import Entry, EntryData
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.errors import (
    EntryNotFoundError,
    OffloadedReadError,
    OffloadedReadPending,
    StorageClosedError,
    StorageError,
)
from magnetar.storage.ledger_files import OPEN_LEDGER_FILES, try_hold
from magnetar.storage.ledger_info import OFFLOADED, OFFLOADING, LedgerInfo, Offload, bytes_after
from magnetar.storage.ledger_reads import LedgerReader, ReadableLedger
from magnetar.storage.ledger_recovery import recover_ledgers, remove_orphan_segments
from magnetar.storage.metadata_store import ManagedLedgerRecord, MetadataStore
from magnetar.storage.offload_selection import past_deletion_lag
from magnetar.storage.offloaded_segment import OffloadedSegment
from magnetar.storage.owner_ref import WeakCall
from magnetar.storage.position import Position
from magnetar.storage.retention import deletable_ledgers
from magnetar.storage.segment import Segment, delete_segment_files, index_bytes, segment_paths
from magnetar.storage.segment_readers import SegmentReaders
from magnetar.storage.syncer import Syncer
from magnetar.storage.tiered_reads import TieredReads
from magnetar.storage.virtual_cursors import VirtualCursorStore
from magnetar.storage.virtual_cursors_elsewhere import VirtualCursorsElsewhere
from magnetar.storage.write_gate import WriteGate

log = logging.getLogger(__name__)
#: What its parts call it when it is gone (owner_ref.py).
ML = "managed ledger"

_T = TypeVar("_T")


class ManagedLedger:
    """An append-only log of entries, stored as a sequence of ledgers (one segment file each).

    Adds go to the current ledger, which rolls over by size or age. An entry is
    readable once durable: ``last_confirmed`` is the last such entry. While the
    managed ledger holds no entry, ``last_confirmed`` and ``last_added`` are
    ``Position(current ledger, -1)``; after a rollover they stay on the previous
    ledger's last entry until the new ledger gets one.

    Adds, reads and cursors are meant for one owner thread; the fsync thread
    completes adds. ``on_durable`` callbacks of one managed ledger fire in
    position order, through ``notify`` when one was given.
    """

    # A managed ledger has more attributes than CPython 3.11 keeps inline in an object (30): its
    # instance dict was a table of its own, 1.6 KiB for each loaded topic. ``__dict__`` is for a
    # test that patches one instance's method (made only then); ``__weakref__`` for owner_ref.py.
    __slots__ = (
        "__dict__",
        "__weakref__",
        "_cache",
        "_closed",
        "_compacted",
        "_config",
        "_current",
        "_cursors",
        "_dir",
        "_gate",
        "_id",
        "_infos",
        "_last_added",
        "_last_confirmed",
        "_ledgers",
        "_lock",
        "_metadata",
        "_next_ledger",
        "_notify",
        "_offloaded",
        "_on_close",
        "_pending",
        "_pending_segments",
        "_preallocate",
        "_properties",
        "_reader",
        "_readers",
        "_round_lock",
        "_syncer",
        "_tiered",
        "damage",
        "name",
        "on_offloaded_data",
    )

    def __init__(
        self,
        record: ManagedLedgerRecord,
        directory: Path,
        config: StorageConfig,
        metadata: MetadataStore,
        syncer: Syncer,
        cache: EntryCache,
        notify: Notify | None,
        on_close: Callable[[ManagedLedger], None],
        tiered: TieredReads | None = None,
    ):
        self.name = record.name
        self._id = record.ml_id
        self._dir = directory
        self._config = config
        self._metadata = metadata
        self._syncer = syncer
        self._cache = cache
        self._notify = notify
        self._on_close = on_close
        # Zeros ahead only pay where every round fsyncs: with "interval" an fsync covers many
        # writes, with "never" there is none, and zeroing would double the bytes written.
        self._preallocate = config.preallocate_bytes if config.fsync_policy == "always" else 0
        self._lock = threading.RLock()
        self._round_lock = threading.RLock()  # one group-commit round at a time keeps callbacks in order
        self._readers = SegmentReaders(directory)
        self._pending: list[tuple[Position, DurableCallback | None]] = []
        self._pending_segments: list[Segment] = []
        #: Whether adds are accepted now (a full disk, a failed fsync), see write_gate.py.
        self._gate = WriteGate(self.name, DiskSpace(directory, config.min_free_disk_bytes))
        #: A rollover whose metadata is committed but whose new segment is not created yet.
        self._next_ledger: tuple[int, LedgerInfo, float] | None = None
        self._closed = False
        # Its parts call it back through weak references (owner_ref.py): no cycle keeps a closed
        # managed ledger in memory until the collector's next full pass.
        self.damage = DamageLog(keep=WeakCall(self.set_property, ML, self.name))
        self._cursors = ManagedCursorContainer(
            self,
            self._id,
            directory,
            config,
            metadata,
            self.damage,
            self._lock,
            WeakCall(self._check_open, ML, self.name),
        )
        self._reader = LedgerReader(
            self._id,
            cache,
            WeakCall(self._segment_for, ML, self.name),
            WeakCall(self._damaged_read, ML, self.name),
        )
        #: Its properties, read once here: reads need no metadata query (and no wait for its
        #: lock behind another thread's commit); writes go through to the store.
        self._properties = metadata.properties(record.ml_id)
        self.damage.restore(self.name, self._properties)
        self._infos, self._ledgers, self._current = recover_ledgers(
            metadata, self._id, directory, self._preallocate, syncer, self._note_damage
        )
        remove_orphan_segments(directory, self._ledgers, config.data_dir, self.name)
        self._last_added = self._last_confirmed = self._ledgers.last_position()
        #: Offloaded ledgers are read through it (None: a store without tiered storage).
        self._tiered = tiered
        #: Offloaded ledgers whose local files are gone, being read from their objects.
        self._offloaded: dict[int, OffloadedSegment] = {}
        #: Called (on the thread that fetched) once offloaded bytes a read waited for are fetched
        #: or failed: the owner reads again (a broker wakes the topic's dispatchers).
        self.on_offloaded_data: Callable[[], None] | None = None
        #: The original positions of the topic's compacted view (``set_compacted_positions``).
        self._compacted: Sequence[Position] = ()
        self._recover_offloads()
        self._cursors.load()
        OPEN_LEDGER_FILES.opened(self, self._files_open())

    def __repr__(self) -> str:
        return f"ManagedLedger({self.name!r}, last_confirmed={self._last_confirmed})"

    # ------------------------------------------------------------------ writes

    @property
    def last_confirmed(self) -> Position:
        return self._last_confirmed

    @property
    def last_added(self) -> Position:
        return self._last_added

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def fenced(self) -> bool:
        """True after a failed fsync (or an I/O error other than a full disk), until writes resume:
        the entries not confirmed by then are dropped, and adds are tried again once
        ``RESUME_DELAY_S`` has passed and there is room on the disk."""
        return self._gate.failure is not None

    @property
    def writable(self) -> bool:
        """False while adds are refused (full disk, free space below the threshold, failed fsync)."""
        return self._gate.reason is None

    @property
    def write_errors(self) -> int:
        """Adds refused or failed for lack of space or an I/O error, since opening (for /metrics)."""
        return self._gate.write_errors

    def check_writable(self) -> None:
        """Raise the error an add would get now, without writing (a broker asks before it lets a
        producer on); after a failure, this is what resumes writes once there is room again. The
        open ledger's files are opened again if they were closed (``ledger_files``), so an
        ``OSError`` an add would meet there (out of descriptors, a file gone) is raised here too."""
        with self._lock:
            self._check_writable()
            self._live_current()

    def add_entry(self, data: EntryData | bytearray, on_durable: DurableCallback | None = None) -> Position:
        """Append ``data`` now and return its position; ``on_durable`` fires once it is durable.

        ``data`` is kept (in the entry cache, while the managed ledger has a cursor) as given
        when it is ``bytes`` or a read-only memoryview, whose memory the caller must never
        change; anything else is copied.

        Durable means fsynced for the "always" and "interval" policies, and
        written to the OS for "never". On a failed fsync the callback gets
        ``(None, error)`` and the managed ledger is fenced.
        """
        if not isinstance(data, bytes) and not (isinstance(data, memoryview) and data.readonly):
            data = bytes(data)
        never = self._syncer.policy == "never"
        with self._lock:
            self._check_writable()
            self._live_current()
            try:
                if self._next_ledger is not None or self._should_roll_over():
                    self._roll_over()
                segment = self._current
                entry_id = segment.append(data)
            except (OSError, StorageError) as exc:
                creating = self._next_ledger[0] if self._next_ledger is not None else None
                raise self._gate.write_failed(exc, creating, len(data)) from exc
            if self._gate.reason is not None:
                self._gate.resumed()
            position = Position(segment.ledger_id, entry_id)
            self._ledgers.set_count(segment.ledger_id, entry_id + 1)
            self._last_added = position
            if self._cursors.any():
                # As Pulsar's managed ledger (entries are cached only while it has cursors): a
                # topic only written to, a device's per topic, would keep its last messages in
                # memory for nobody, and push the entries that readers wait for out of the cache.
                self._cache.put(self._id, position, data)
            if never:
                self._last_confirmed = position
            else:
                first = not self._pending
                self._pending.append((position, on_durable))
                if not self._pending_segments or self._pending_segments[-1] is not segment:
                    self._pending_segments.append(segment)
        if never:
            if on_durable is not None:
                dispatch(self._notify, [(on_durable, position)], None, self.name)
        elif first:
            self._syncer.request(self)
        return position

    def _check_writable(self) -> None:
        self._check_open()
        self._gate.check(self._drop_unconfirmed)

    def _drop_unconfirmed(self) -> bool:
        """After a failed fsync (``WriteGate.check``): drop the unconfirmed entries, unless a
        group-commit round is pending; True once they are dropped."""
        if self._pending or not self._round_lock.acquire(blocking=False):
            return False  # the next round fails what is pending; try again after it
        try:
            confirmed = self._last_confirmed
            try:
                current = self._live_current()
                keep = confirmed.entry_id + 1 if confirmed.ledger_id == current.ledger_id else 0
                current.truncate_to(keep)
            except OSError as exc:
                log.debug("%s: cannot drop the unconfirmed entries yet: %s", self.name, exc)
                self._gate.failed_at = time.monotonic()
                return False
            self._ledgers.set_count(current.ledger_id, keep)
            self._last_added = confirmed
            self._cache.invalidate(self._id, {current.ledger_id})
            return True
        finally:
            self._round_lock.release()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosedError(f"managed ledger {self.name} is closed")

    def _should_roll_over(self) -> bool:
        segment, config = self._current, self._config
        if segment.entries == 0:
            return False
        age = time.time() - self._infos[segment.ledger_id].created_at
        return segment.size_bytes >= config.max_ledger_size_bytes or age >= config.max_ledger_age_seconds

    def _roll_over(self) -> None:
        """Close the current ledger and start a new one, committed before its first write.

        In steps that each leave a state the next add can go on from when one fails for lack
        of space: fsync the old ledger (a failure fences, as a failed round does); commit its
        close and the new ledger's row; create the new files (retried by the next add while
        ``_next_ledger`` is set); only then close the old files, whose data is already durable.
        """
        old = self._current
        if self._next_ledger is None:
            try:
                self._syncer.count(old.sync())
            except OSError as exc:
                self._gate.fence(exc)
                raise
            now = time.time()
            info = self._infos[old.ledger_id]
            closed = replace(info, entries=old.entries, size_bytes=old.size_bytes, closed=True, closed_at=now)
            new_id = self._metadata.create_ledger(self._id, now, close=closed)
            self._infos[old.ledger_id] = closed
            self._next_ledger = (new_id, closed, now)
        new_id, closed, now = self._next_ledger
        self._current = Segment.create(self._dir, new_id, self._preallocate)
        self._next_ledger = None
        self._infos[new_id] = LedgerInfo(new_id, 0, 0, now, False)
        self._ledgers.append(new_id)
        try:
            self._syncer.count(old.close())
        except OSError as exc:  # its entries are fsynced and counted; the index is rebuilt on read
            log.warning("%s: closing ledger %d: %s", self.name, old.ledger_id, exc)
        log.debug("%s: rolled over from ledger %d to %d", self.name, old.ledger_id, new_id)

    def sync_round(self) -> int:
        """Fsync what is pending, advance ``last_confirmed`` and complete the callbacks (fsync thread)."""
        with self._round_lock:
            with self._lock:
                batch, self._pending = self._pending, []
                segments, self._pending_segments = self._pending_segments, []
                failure = self._gate.failure
            if not batch:
                return 0
            fsyncs = 0
            if failure is None:
                try:
                    for segment in segments:
                        fsyncs += segment.sync()
                except OSError as exc:
                    failure = exc
            with self._lock:
                if failure is None:
                    self._last_confirmed = max(self._last_confirmed, batch[-1][0])
                else:
                    self._gate.fence(failure)
                    self._gate.write_errors += len(batch)
            dispatch(self._notify, [(cb, pos) for pos, cb in batch if cb is not None], failure, self.name)
            return fsyncs

    # ------------------------------------------------------------------- files

    def _files_open(self) -> int:
        """Descriptors held now: the open ledger's log and index, and each closed ledger being read."""
        return (0 if self._current.closed else 2) + self._readers.open_count

    def _live_current(self) -> Segment:
        """The open ledger's segment, its files opened again if they were parked (call with the lock)."""
        segment = self._current
        if not segment.closed:
            OPEN_LEDGER_FILES.used(self)
            return segment
        self._check_open()
        segment = self._current = Segment.reopen(
            self._dir, segment.ledger_id, segment.offsets, segment.size_bytes, self._preallocate
        )
        OPEN_LEDGER_FILES.opened(self, self._files_open())
        return segment

    def park(self) -> bool:
        """Close every file (``ledger_files``: few ledgers keep descriptors) unless another thread
        is using them, an fsync is pending or running, or a rollover is half done; True once they
        are closed. Entries written but not fsynced (the ``never`` policy) are fsynced first, as a
        close does; with the other policies every entry is synced by then, and the index is
        derived data."""
        if not try_hold(self._lock):
            return False
        try:
            if not try_hold(self._round_lock):
                return False
            try:
                if self._closed or (self._current.closed and not self._readers.open_count):
                    return True
                if self._pending or self._next_ledger is not None or self._gate.failure is not None:
                    return False
                current = self._current
                if not current.closed:
                    try:  # the files are closed whatever happens
                        self._syncer.count(current.close(sync=current.synced_entries < current.entries))
                    except OSError as exc:  # as a failed round: what was not fsynced is not trusted
                        log.error("%s: closing ledger %d failed: %s", self.name, current.ledger_id, exc)
                        self._gate.fence(exc)
                self._readers.close_all()
                OPEN_LEDGER_FILES.closed(self)
                return True
            finally:
                self._round_lock.release()
        finally:
            self._lock.release()

    # ------------------------------------------------------------------- reads

    def read_entry(self, position: Position, *, wait: bool = True) -> Entry:
        """The entry at ``position``; EntryNotFoundError when there is none or it is damaged.
        An offloaded entry is waited for (up to ``offload_read_timeout_seconds``), or with
        ``wait=False`` raises ``OffloadedReadPending`` while it is fetched."""

        def read() -> Entry:
            with self._lock:
                self._check_open()
                if not self.has_entry(position):
                    raise EntryNotFoundError(f"{self.name}: no readable entry at {position}")
                got, _ = self._reader.read_span(position, 1, None, True)
                if not got:
                    raise EntryNotFoundError(f"{self.name}: the entry at {position} is damaged")
                return got[0]

        return self._waiting(read) if wait else read()

    def read_entries(
        self,
        start: Position,
        max_entries: int,
        max_bytes: int | None = None,
        *,
        at_least_one: bool = True,
        wait: bool = True,
    ) -> list[Entry]:
        """Entries from ``start`` (inclusive) on, across ledgers, never past ``last_confirmed``.

        Stops at ``max_entries`` or before ``max_bytes`` of data would be passed,
        but returns at least one entry when any is readable (unless ``at_least_one``
        is False, which callers that already hold entries use). A damaged entry is
        left out, as if it was not there, and counts against neither limit; every
        cursor is told it is gone (``ManagedCursorContainer.skip_damaged``).

        Offloaded entries being fetched from the object store: with ``wait`` the read waits for
        them (``OffloadedReadError`` after ``offload_read_timeout_seconds``); without it, it returns
        what it read before them, or raises ``OffloadedReadPending`` when that is nothing
        (``on_offloaded_data`` is called once they are there).
        """

        def read() -> list[Entry]:
            with self._lock:
                self._check_open()
                return self._reader.read(
                    self._ledgers, start, self._last_confirmed, max_entries, max_bytes, at_least_one, not wait
                )

        return self._waiting(read) if wait else read()

    @property
    def offload_read_timeout_seconds(self) -> float:
        """The longest a read that must answer waits for offloaded bytes."""
        return self._config.offload_read_timeout_seconds

    def _waiting(self, read: Callable[[], _T]) -> _T:
        """``read()``, again after each fetch of offloaded bytes it waits for (not under the lock),
        or as soon as the store is found failing (the read then fails at once)."""
        deadline = time.monotonic() + self._config.offload_read_timeout_seconds
        while True:
            try:
                return read()
            except OffloadedReadPending as pending:
                woken = threading.Event()
                pending.then(woken.set)
                left = deadline - time.monotonic()
                if left <= 0 or not woken.wait(left):
                    raise OffloadedReadError(
                        f"{self.name}: offloaded data not read from the object store within"
                        f" {self._config.offload_read_timeout_seconds:g} s"
                    ) from None

    def _offloaded_ready(self) -> None:
        """A fetch a read waited for is over (on a reader thread): the owner hears of it on its own
        thread, through ``notify`` when one was given."""
        callback = self.on_offloaded_data
        if callback is None:
            return
        if self._notify is None:
            callback()
        else:
            try:
                self._notify(callback)
            except Exception:  # the owner's loop is closed: nobody waits any more
                log.debug("%s: offloaded data fetched after the owner stopped", self.name)

    def _segment_for(self, ledger_id: int) -> ReadableLedger:
        if ledger_id == self._current.ledger_id:
            return self._live_current()
        info = self._infos.get(ledger_id)
        if info is not None and not info.local:
            return self._offloaded_segment(info)
        readers = self._readers
        before = readers.open_count
        segment = readers.get(ledger_id, self._ledgers.count(ledger_id))
        if readers.open_count != before:
            OPEN_LEDGER_FILES.opened(self, self._files_open())
        else:
            OPEN_LEDGER_FILES.used(self)
        if segment.damage:
            self._note_damage(segment.damage)
            segment.damage = []
        return segment

    def _offloaded_segment(self, info: LedgerInfo) -> OffloadedSegment:
        segment = self._offloaded.get(info.ledger_id)
        if segment is None:
            if self._tiered is None:
                raise OffloadedReadError(
                    f"{self.name}: ledger {info.ledger_id} is offloaded, but no offload driver is configured"
                )
            if len(self._offloaded) >= 8:  # as SegmentReaders: the oldest opened goes
                del self._offloaded[next(iter(self._offloaded))]
            segment = self._offloaded[info.ledger_id] = OffloadedSegment(
                info, self._tiered, self._offloaded_ready
            )
        return segment

    # ----------------------------------------------------------- tiered storage

    def _recover_offloads(self) -> None:
        """On open: an offload a crash interrupted is given up (its object queued for deletion, to
        be written again under a new key); local files of ledgers read from their objects (a crash
        between the commit and the deletion) are deleted."""
        for ledger_id, info in list(self._infos.items()):
            offload = info.offload
            if offload is None:
                continue
            if offload.state == OFFLOADING:
                self._metadata.abort_offload(ledger_id, offload.key)
                self._infos[ledger_id] = replace(info, offload=None)
                log.info(
                    "%s: the offload of ledger %d to %s did not complete; it is done again",
                    self.name,
                    ledger_id,
                    offload.key,
                )
            elif offload.local_deleted:
                delete_segment_files(self._dir, ledger_id)

    def offload_source(self, ledger_id: int) -> tuple[Path, int, bytes]:
        """What an offloader copies of a closed local ledger: its log file, the size of its data,
        and its index (little-endian u64 offsets, one per entry, as storage reads them: a missing
        or damaged index file is rebuilt from the log). Any thread; reads the files."""
        with self._lock:
            info = self._infos.get(ledger_id)
            if info is None or not info.closed or not info.local:
                raise StorageError(f"{self.name}: ledger {ledger_id} is not a closed local ledger")
        segment = Segment.open_read(self._dir, ledger_id, info.entries)
        try:
            if segment.damage or segment.size_bytes != info.size_bytes:
                raise StorageError(
                    f"{self.name}: ledger {ledger_id} does not read back as it was closed"
                    f" ({segment.size_bytes} bytes, {len(segment.damage)} damaged places): not offloaded"
                )
            return segment_paths(self._dir, ledger_id)[0], segment.size_bytes, index_bytes(segment.offsets)
        finally:
            segment.close()

    def begin_offload(self, ledger_id: int, key: str) -> bool:
        """Record (durably) that ``key`` is being written for ledger ``ledger_id``; False when the
        ledger cannot be offloaded now (gone, open, offloaded or being offloaded)."""
        with self._lock:
            info = self._infos.get(ledger_id)
            if info is None or not info.closed or info.offload is not None:
                return False
            if not self._metadata.begin_offload(ledger_id, key):
                return False
            self._infos[ledger_id] = replace(info, offload=Offload(key))
            return True

    def complete_offload(self, ledger_id: int, key: str, object_size: int, checksum: int) -> bool:
        """The object ``key`` is complete and verified (size, CRC32C); False when the ledger no
        longer waits for it (trimmed or deleted meanwhile): then nothing owns the object."""
        now = time.time()
        with self._lock:
            if not self._metadata.complete_offload(ledger_id, key, object_size, checksum, now):
                return False
            info = self._infos.get(ledger_id)
            if info is not None:
                offload = Offload(key, OFFLOADED, object_size, checksum, now)
                self._infos[ledger_id] = replace(info, offload=offload)
            return True

    def abort_offload(self, ledger_id: int, key: str) -> None:
        """An attempt failed: the ledger is local only again, and ``key`` goes to the garbage."""
        with self._lock:
            self._metadata.abort_offload(ledger_id, key)
            info = self._infos.get(ledger_id)
            if info is not None and info.offload is not None and info.offload.key == key:
                self._infos[ledger_id] = replace(info, offload=None)

    def delete_offloaded_local(self, deletion_lag_seconds: float) -> list[int]:
        """Delete the local files of the ledgers offloaded ``deletion_lag_seconds`` ago or longer
        (the metadata first says they are read from their objects), and their entries in the
        entry cache; returns their ids."""
        with self._lock:
            self._check_open()
            closed = [self._infos[ledger_id] for ledger_id in self._ledgers.ids()[:-1]]
            doomed = [info.ledger_id for info in past_deletion_lag(closed, deletion_lag_seconds, time.time())]
            if not doomed:
                return []
            self._metadata.mark_local_deleted(doomed)
            for ledger_id in doomed:
                info = self._infos[ledger_id]
                assert info.offload is not None
                self._infos[ledger_id] = replace(info, offload=replace(info.offload, local_deleted=True))
                self._readers.discard(ledger_id)
            if not self._current.closed:
                OPEN_LEDGER_FILES.opened(self, self._files_open())
            # Their entries are read from the objects from now on, not from memory either.
            self._cache.invalidate(self._id, set(doomed))
        for ledger_id in doomed:
            delete_segment_files(self._dir, ledger_id)
        log.info("%s: deleted the local copies of offloaded ledgers %s", self.name, doomed)
        return doomed

    # ------------------------------------------------------------------ damage

    def _note_damage(self, places: Iterable[Damage]) -> None:
        self.damage.note(self.name, places)

    def _damaged_read(self, damaged: list[Damage]) -> None:
        """A read passed over damaged entries: reported, and skipped by every cursor."""
        self._note_damage(damaged)
        positions = [Position(d.ledger_id, d.entry_id) for d in damaged if d.entry_id is not None]
        self._cursors.skip_damaged(positions)

    # --------------------------------------------------------------- positions

    def has_entry(self, position: Position) -> bool:
        """True when an entry exists at ``position`` and is readable (<= ``last_confirmed``)."""
        return position <= self._last_confirmed and self._ledgers.exists(position)

    def next_position(self, position: Position) -> Position:
        """The position after ``position``, crossing ledgers (may be where the next add will go)."""
        with self._lock:
            return self._ledgers.next_position(position)

    def previous_position(self, position: Position) -> Position:
        """The position before ``position``, crossing ledgers; ``(ledger, -1)`` with nothing before."""
        with self._lock:
            return self._ledgers.previous_position(position)

    def ceil_position(self, position: Position) -> Position:
        """``position`` if it holds (or will hold) an entry, else the start of the next ledger."""
        with self._lock:
            return self._ledgers.ceil(position)

    def first_position(self) -> Position | None:
        """The first readable entry, or None when there is none."""
        with self._lock:
            first = self._ledgers.first_position()
            return first if first is not None and first <= self._last_confirmed else None

    def before_first(self) -> Position:
        """Just before the first entry (before where the next add goes, with none): a mark-delete
        position below it lies in ledgers trimmed since."""
        with self._lock:
            first = self._ledgers.ceil(Position.EARLIEST)
        return Position(first.ledger_id, first.entry_id - 1)

    # ------------------------------------ the compacted view's positions (broker/compacted_topic.py)

    def set_compacted_positions(self, positions: Sequence[Position]) -> None:
        """The original positions of the topic's compacted view, in order (its compacted ledger's,
        kept outside the ledgers). Those before the first entry, in ledgers trimmed since, are still
        messages to a subscription reading the view: its cursor keeps their acknowledgements and
        moves its mark-delete position over them (``cursor.py``)."""
        self._compacted = positions

    def compacted_after(self, position: Position) -> Position | None:
        """The compacted view's first position after ``position``, if it lies before the first entry."""
        kept = self._compacted
        index = bisect_right(kept, position)
        if index < len(kept) and kept[index] < self.before_first():
            return kept[index]
        return None

    def holds_compacted(self, position: Position) -> bool:
        """Whether ``position`` is one of the compacted view's, before the first entry."""
        kept = self._compacted
        index = bisect_left(kept, position)
        return index < len(kept) and kept[index] == position and position < self.before_first()

    def number_of_entries(self, start: Position, end: Position) -> int:
        with self._lock:
            return self._ledgers.number_of_entries(start, end)

    def entries_in_ledger(self, ledger_id: int) -> int:
        with self._lock:
            return self._ledgers.count(ledger_id)

    def ledgers(self) -> list[LedgerInfo]:
        with self._lock:
            infos = [self._infos[ledger_id] for ledger_id in self._ledgers.ids()]
            current = self._current
            infos[-1] = replace(infos[-1], entries=current.entries, size_bytes=current.size_bytes)
            return infos

    def size_bytes(self) -> int:
        """Bytes of all the ledgers' segment data, local or offloaded (Pulsar's storageSize)."""
        return sum(info.size_bytes for info in self.ledgers())

    def offloaded_size_bytes(self) -> int:
        """Bytes of the ledgers with a verified copy in the object store (Pulsar's offloadedStorageSize)."""
        return sum(info.size_bytes for info in self.ledgers() if info.offloaded)

    def size_after(self, position: Position) -> int:
        """Estimated bytes of the entries after ``position`` (Pulsar's estimated backlog size)."""
        return bytes_after(self.ledgers(), position)

    @property
    def current_ledger_id(self) -> int:
        return self._current.ledger_id

    @property
    def directory(self) -> Path:
        """Its directory (where files of its own live beside its ledgers: ``compacted_ledger.py``)."""
        return self._dir

    def allocate_ledger_id(self) -> int:
        """A new id from the store's ledger-id counter (durably taken; never handed out again)."""
        return self._metadata.allocate_ledger_id()

    # ------------------------------------------------ cursors (ManagedCursorContainer's)

    def open_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """The durable cursor ``name``, created at the latest or earliest entry if it is new."""
        return self._cursors.open(name, initial_position)

    def prepare_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """A new durable cursor, stored but not yet in use (off the owner's thread; then ``adopt_cursor``)."""
        return self._cursors.prepare(name, initial_position)

    def adopt_cursor(self, cursor: ManagedCursor) -> ManagedCursor:
        """Put a cursor from ``prepare_cursor`` in use (owner's thread); returns the one in use."""
        return self._cursors.adopt(cursor)

    def new_non_durable_cursor(self, start: Position, name: str | None = None) -> ManagedCursor:
        """A cursor whose first read is at ``start``; never persisted, holds no retention."""
        return self._cursors.new_non_durable(start, name)

    def cursors(self) -> dict[str, ManagedCursor]:
        """The durable cursors, by name."""
        return self._cursors.durable()

    def delete_cursor(self, name: str) -> None:
        """Forget a durable cursor (no-op when unknown); it stops holding retention."""
        self._cursors.delete(name)

    def flush_cursors(self) -> None:
        """Persist every durable cursor whose state changed, then every changed virtual cursor."""
        self._cursors.flush()

    def virtual_cursors(self, cursor: str) -> VirtualCursorStore:
        """The virtual cursors kept on the cursor ``cursor`` (written by ``flush_cursors``)."""
        return self._cursors.virtual_cursors(cursor)

    def virtual_cursors_elsewhere(self, cursor: str) -> VirtualCursorsElsewhere:
        """The virtual cursors other writers (followers on other workers) keep on ``cursor``."""
        return VirtualCursorsElsewhere(self._metadata, self._id, cursor, cursor)

    def persist_cursors(self, cursors: Iterable[ManagedCursor]) -> None:
        """Flush each dirty cursor; one that fails does not stop the others (its error is raised after)."""
        self._cursors.persist(cursors)

    # --------------------------------------------------------------- retention

    def trim(
        self, retention_time_seconds: float | None = None, retention_size_bytes: int | None = None
    ) -> list[int]:
        """Delete closed ledgers every durable cursor has consumed and retention lets go; returns their ids.

        With no durable cursor every entry counts as consumed (as in Pulsar); the
        current ledger is never deleted. The retention arguments override the
        configured ones (the broker passes a namespace's policy).
        """
        with self._lock:
            self._check_open()
            slowest = self._cursors.slowest_mark_delete()
            closed = [self._infos[ledger_id] for ledger_id in self._ledgers.ids()[:-1]]
            # A ledger being offloaded stays until its attempt ends (its object would be orphaned).
            busy = next(
                (n for n, info in enumerate(closed) if info.offload and not info.offload.complete), None
            )
            closed = closed if busy is None else closed[:busy]
            cfg = self._config
            doomed = deletable_ledgers(
                closed,
                self._last_confirmed if slowest is None else slowest,
                cfg.retention_time_seconds if retention_time_seconds is None else retention_time_seconds,
                cfg.retention_size_bytes if retention_size_bytes is None else retention_size_bytes,
                time.time(),
            )
            if not doomed:
                return []
            keys = [off.key for ledger_id in doomed if (off := self._infos[ledger_id].offload) is not None]
            self._metadata.delete_ledgers(doomed, keys)  # their objects go with them (offload_garbage)
            for ledger_id in doomed:
                self._ledgers.remove(ledger_id)
                del self._infos[ledger_id]
                self._readers.discard(ledger_id)
                self._offloaded.pop(ledger_id, None)
            if not self._current.closed:
                OPEN_LEDGER_FILES.opened(self, self._files_open())  # fewer readers open
            self._cache.invalidate(self._id, set(doomed))
        for ledger_id in doomed:
            delete_segment_files(self._dir, ledger_id)
        log.info("%s: trimmed ledgers %s", self.name, doomed)
        return doomed

    # -------------------------------------------------------------- properties

    def get_property(self, key: str) -> str | None:
        return self._properties.get(key)

    def set_property(self, key: str, value: str) -> None:
        """Durably store a small value (committed before this returns)."""
        self._metadata.set_property(self._id, key, value)
        self._properties[key] = value

    def delete_property(self, key: str) -> None:
        self._metadata.delete_property(self._id, key)
        self._properties.pop(key, None)

    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    # ----------------------------------------------------------------- closing

    def close(self) -> None:
        """Persist cursors, complete pending adds, fsync and close the files. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._cursors.close()
            self._syncer.count(self.sync_round())
        finally:
            with self._lock:
                current = self._current
                try:
                    self._syncer.count(current.close())
                except OSError as exc:
                    log.error("%s: closing ledger %d failed: %s", self.name, current.ledger_id, exc)
                self._readers.close_all()
                OPEN_LEDGER_FILES.closed(self)
                info = replace(
                    self._infos[current.ledger_id], entries=current.entries, size_bytes=current.size_bytes
                )
                self._metadata.update_ledger(info)
            self._cache.invalidate(self._id)
            self._on_close(self)
