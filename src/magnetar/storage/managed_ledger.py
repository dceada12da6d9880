"""ManagedLedger: one topic's log, a sequence of ledgers with cursors over it."""

from __future__ import annotations

import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from magnetar.storage.callbacks import DurableCallback, Notify, dispatch
from magnetar.storage.config import StorageConfig
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.cursor_ledger import (
    CURSORS_DIR,
    cursor_ledger_ids,
    cursor_ledger_paths,
    delete_cursor_ledger_files,
    read_owner,
    write_owner,
)
from magnetar.storage.cursor_state import CursorState
from magnetar.storage.cursor_store import CursorStore
from magnetar.storage.damage import Damage, DamageLog
from magnetar.storage.disk_space import DiskSpace, is_out_of_space
from magnetar.storage.entry import Entry, EntryData
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.errors import (
    CorruptionError,
    EntryNotFoundError,
    ManagedLedgerFencedError,
    StorageClosedError,
    StorageError,
    StorageFullError,
)
from magnetar.storage.ledger_info import LedgerInfo
from magnetar.storage.ledger_list import LedgerList
from magnetar.storage.metadata_store import ManagedLedgerRecord, MetadataStore, StoredCursor
from magnetar.storage.orphans import move_aside
from magnetar.storage.position import Position
from magnetar.storage.retention import consumed_ledgers, past_retention
from magnetar.storage.segment import Segment, SegmentReaders, delete_segment_files
from magnetar.storage.syncer import Syncer

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|idx)$")
#: After a failed fsync, writes are tried again no sooner than this (bounds retries and log lines).
RESUME_DELAY_S = 1.0


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
    ):
        self.name = record.name
        self._id = record.ml_id
        self._dir = directory
        self._cursor_dir = directory / CURSORS_DIR
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
        self._ledgers = LedgerList()
        self._infos: dict[int, LedgerInfo] = {}
        self._readers = SegmentReaders(directory)
        self._pending: list[tuple[Position, DurableCallback | None]] = []
        self._pending_segments: list[Segment] = []
        self._failure: Exception | None = None
        self._failed_at = 0.0
        self._space = DiskSpace(directory, config.min_free_disk_bytes)
        #: Why adds are refused now (None: they are accepted); logged once per episode.
        self._refusing: str | None = None
        self._refusing_since = 0.0
        self._refused_in_episode = 0
        #: Adds refused or failed for lack of space or an I/O error, since opening (for /metrics).
        self.write_errors = 0
        #: A rollover whose metadata is committed but whose new segment is not created yet.
        self._next_ledger: tuple[int, LedgerInfo, float] | None = None
        self._cursor_flush_failing: set[str] = set()
        self._closed = False
        self._cursors: dict[str, ManagedCursor] = {}
        self._non_durable: weakref.WeakSet[ManagedCursor] = weakref.WeakSet()  # told of damaged entries too
        self._non_durable_seq = 0
        self.damage = DamageLog()
        #: The managed ledger's properties, read once here: reads need no metadata query (and no
        #: wait for its lock behind another thread's commit); writes go through to the store.
        self._properties = metadata.properties(record.ml_id)
        self._current = self._recover()
        self._last_added = self._last_confirmed = self._ledgers.last_position()
        self._load_cursors()

    def __repr__(self) -> str:
        return f"ManagedLedger({self.name!r}, last_confirmed={self._last_confirmed})"

    # ---------------------------------------------------------------- recovery

    def _recover(self) -> Segment:
        """Rebuild the ledger list; the open ledger's tail is checked and a torn record cut off.

        Closed ledgers' entry counts come from the metadata store. The open
        ledger, which is always the last, is recovered from its files and stays
        the one appended to, so restarts do not pile up ledgers.
        """
        infos = self._metadata.ledgers(self._id)
        current = infos.pop() if infos and not infos[-1].closed else None
        for info in infos:
            if not info.closed:  # cannot happen (rollover is one commit); if it did, keep what is there
                segment = Segment.recover(self._dir, info.ledger_id)
                self._note_damage(segment.damage)
                self._syncer.count(segment.close())
                info = replace(info, entries=segment.entries, size_bytes=segment.size_bytes, closed=True)
                info = replace(info, closed_at=time.time())
                self._metadata.update_ledger(info)
            self._infos[info.ledger_id] = info
            self._ledgers.append(info.ledger_id, info.entries)
        if current is None:
            now = time.time()
            current = LedgerInfo(self._metadata.create_ledger(self._id, now), 0, 0, now, False)
            segment = Segment.create(self._dir, current.ledger_id, self._preallocate)
        else:
            segment = Segment.recover(self._dir, current.ledger_id, self._preallocate)
            self._note_damage(segment.damage)
        self._infos[current.ledger_id] = current
        self._ledgers.append(current.ledger_id, segment.entries)
        self._remove_orphan_files()
        return segment

    def _remove_orphan_files(self) -> None:
        """Account for segment files no ledger row owns.

        Trim deletes the oldest ledgers (rows first, in one commit, then files), so a file older
        than every ledger left is what a crash in the middle of a trim leaves: it is deleted, as
        retention meant. Any other such file cannot be explained and is moved aside.
        """
        first = self._ledgers.ids()[0]
        for path in sorted(self._dir.iterdir()):
            match = _SEGMENT_FILE.match(path.name)
            if not match or int(match.group(1)) in self._ledgers:
                continue
            if int(match.group(1)) < first:
                path.unlink(missing_ok=True)
            else:
                move_aside(self._config.data_dir, path, f"{self.name}: no ledger row owns this segment file")

    def _load_cursors(self) -> None:
        """Recover each durable cursor from its cursor ledger; those in the earlier JSON form are migrated.

        A cursor ledger no row names, with an id this metadata store handed out, is what a crash
        while creating, rolling or deleting a cursor leaves (its state is in the cursor ledger the
        row names, or the cursor was never confirmed, or it was deleted): it is deleted. One with
        a higher id comes from elsewhere and is moved aside.
        """
        stored = self._metadata.cursors(self._id)
        in_use = {row.cursor_ledger for row in stored.values() if row.cursor_ledger is not None}
        last_id = self._metadata.last_ledger_id()
        for orphan in sorted(cursor_ledger_ids(self._cursor_dir) - in_use):
            if orphan <= last_id:
                delete_cursor_ledger_files(self._cursor_dir, orphan)
            else:
                for path in cursor_ledger_paths(self._cursor_dir, orphan):
                    if path.exists():
                        reason = f"{self.name}: no cursor names this cursor ledger"
                        move_aside(self._config.data_dir, path, reason)
        for name, row in stored.items():
            store = self._open_cursor_store(name, row)
            self._cursors[name] = ManagedCursor(self, name, True, row.state, store)
        self.flush_cursors()  # writes migrated cursors' first markers and keeps any clamping recovery did

    def _open_cursor_store(self, name: str, row: StoredCursor) -> CursorStore:
        if row.cursor_ledger is None:
            log.info("%s: moving cursor %s from the earlier JSON form to a cursor ledger", self.name, name)
            return self._new_cursor_store(name)
        store = CursorStore.open(
            self._cursor_dir,
            row.cursor_ledger,
            self._metadata.allocate_ledger_id,
            self._cursor_committer(name),
            owner=name,
            **self._cursor_limits(),
        )
        if store.damage:
            for place in store.damage:
                self.damage.add(place)
                log.warning("%s: cursor %s: cursor %s", self.name, name, place.describe())
            recovered = store.recovered.mark_delete if store.recovered is not None else row.state.mark_delete
            log.warning(
                "%s: cursor %s: its cursor ledger %d was damaged; the cursor goes on from the newest"
                " flush that reads back intact (mark-delete %s): acks made after it are lost and"
                " those messages will be delivered again",
                self.name,
                name,
                row.cursor_ledger,
                recovered,
            )
        if read_owner(self._cursor_dir, row.cursor_ledger) is None:  # written before names were kept
            write_owner(self._cursor_dir, row.cursor_ledger, name)
        if store.recovered is None:
            log.error(
                "%s: cursor %s: no intact marker in cursor ledger %d; starting over from mark-delete %s",
                self.name,
                name,
                row.cursor_ledger,
                row.state.mark_delete,
            )
        return store

    def _new_cursor_store(self, name: str) -> CursorStore:
        return CursorStore.create(
            self._cursor_dir,
            self._metadata.allocate_ledger_id,
            self._cursor_committer(name),
            owner=name,
            **self._cursor_limits(),
        )

    def _cursor_committer(self, name: str) -> Callable[[int, Position], None]:
        def commit(cursor_ledger: int, mark_delete: Position) -> None:
            self._metadata.put_cursor(self._id, name, mark_delete, cursor_ledger)

        return commit

    def _cursor_limits(self) -> dict[str, int]:
        return {
            "memory_limit": self._config.max_individual_ack_cache_bytes_per_cursor,
            "min_roll_bytes": self._config.cursor_ledger_min_roll_bytes,
        }

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
        return self._failure is not None

    @property
    def writable(self) -> bool:
        """False while adds are refused (full disk, free space below the threshold, failed fsync)."""
        return self._refusing is None

    def check_writable(self) -> None:
        """Raise the error an add would get now, without writing (a broker asks before it lets a
        producer on); after a failure, this is what resumes writes once there is room again."""
        with self._lock:
            self._check_writable()

    def add_entry(self, data: EntryData, on_durable: DurableCallback | None = None) -> Position:
        """Append ``data`` now and return its position; ``on_durable`` fires once it is durable.

        ``data`` is kept (in the entry cache) as given when it is ``bytes`` or a read-only
        memoryview, whose memory the caller must never change; anything else is copied.

        Durable means fsynced for the "always" and "interval" policies, and
        written to the OS for "never". On a failed fsync the callback gets
        ``(None, error)`` and the managed ledger is fenced.
        """
        if not isinstance(data, bytes) and not (isinstance(data, memoryview) and data.readonly):
            data = bytes(data)
        never = self._syncer.policy == "never"
        with self._lock:
            self._check_writable()
            try:
                if self._next_ledger is not None or self._should_roll_over():
                    self._roll_over()
                segment = self._current
                entry_id = segment.append(data)
            except (OSError, StorageError) as exc:
                raise self._write_failed(exc) from exc
            if self._refusing is not None:
                self._resumed()
            position = Position(segment.ledger_id, entry_id)
            self._ledgers.set_count(segment.ledger_id, entry_id + 1)
            self._last_added = position
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
        if self._failure is not None and not self._try_resume():
            self._refused()
            raise ManagedLedgerFencedError(
                f"{self.name}: writes refused after an I/O error: {self._failure}"
            ) from self._failure
        if self._refusing is not None and not self._space.has_room_to_resume():
            self._refused()  # still no room: refuse without touching the disk
            raise StorageFullError(f"{self.name}: {self._refusing}")
        if self._space.below_threshold():
            self._refuse(
                f"the data directory has {self._space.available()} bytes free,"
                f" below min_free_disk_bytes={self._space.min_free_bytes}"
            )
            self._refused()
            raise StorageFullError(f"{self.name}: {self._refusing}")

    def _write_failed(self, exc: Exception) -> StorageError:
        """An append or rollover failed; the segment is as it was before it. The error for the caller.

        No room: refused until there is room again (nothing to undo). Another I/O error: fenced,
        except half-way through a rollover, whose old ledger is sealed with every entry fsynced
        (dropping any of them would contradict the committed entry count)."""
        if is_out_of_space(exc) or isinstance(exc, StorageFullError):
            self._refuse(f"no space left on the data directory ({exc})")
            self._refused()
            return StorageFullError(f"{self.name}: {self._refusing}")
        if self._next_ledger is not None:
            self._refuse(f"creating ledger {self._next_ledger[0]} failed ({exc})")
            self._refused()
            return ManagedLedgerFencedError(f"{self.name}: {self._refusing}")
        if self._failure is None:
            self._fence(exc)
        self._refused()
        return ManagedLedgerFencedError(f"{self.name}: write failed: {exc}")

    def _refuse(self, reason: str) -> None:
        """Enter (or stay in) the state where adds are refused; logged once per episode."""
        if self._refusing is None:
            self._refusing = reason
            self._refusing_since = time.monotonic()
            log.error("%s: writes refused: %s; they resume once there is room", self.name, reason)

    def _refused(self) -> None:
        self.write_errors += 1
        self._refused_in_episode += 1

    def _resumed(self) -> None:
        log.warning(
            "%s: writes accepted again after %.1f s (%d adds refused meanwhile)",
            self.name,
            time.monotonic() - self._refusing_since,
            self._refused_in_episode,
        )
        self._refusing = None
        self._refused_in_episode = 0

    def _try_resume(self) -> bool:
        """After a failed fsync: drop the unconfirmed entries and accept adds again, once the
        failure is ``RESUME_DELAY_S`` old, there is room, and no group-commit round is pending."""
        if time.monotonic() - self._failed_at < RESUME_DELAY_S or not self._space.has_room_to_resume():
            return False
        if self._pending or not self._round_lock.acquire(blocking=False):
            return False  # the next round fails what is pending; try again after it
        try:
            current = self._current
            confirmed = self._last_confirmed
            keep = confirmed.entry_id + 1 if confirmed.ledger_id == current.ledger_id else 0
            try:
                current.truncate_to(keep)
            except OSError as exc:
                log.debug("%s: cannot drop the unconfirmed entries yet: %s", self.name, exc)
                self._failed_at = time.monotonic()
                return False
            self._ledgers.set_count(current.ledger_id, keep)
            self._last_added = confirmed
            self._cache.invalidate(self._id, {current.ledger_id})
            self._failure = None
            return True
        finally:
            self._round_lock.release()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosedError(f"managed ledger {self.name} is closed")

    def _should_roll_over(self) -> bool:
        segment = self._current
        if segment.entries == 0:
            return False
        if segment.size_bytes >= self._config.max_ledger_size_bytes:
            return True
        age = time.time() - self._infos[segment.ledger_id].created_at
        return age >= self._config.max_ledger_age_seconds

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
                self._fence(exc)
                raise
            now = time.time()
            closed = replace(
                self._infos[old.ledger_id],
                entries=old.entries,
                size_bytes=old.size_bytes,
                closed=True,
                closed_at=now,
            )
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

    def _fence(self, exc: Exception) -> None:
        if self._failure is None:
            self._failure = exc
            self._failed_at = time.monotonic()
            self._refuse(f"an fsync or write failed, unconfirmed entries are dropped ({exc})")

    def sync_round(self) -> int:
        """Fsync what is pending, advance ``last_confirmed`` and complete the callbacks (fsync thread)."""
        with self._round_lock:
            with self._lock:
                batch, self._pending = self._pending, []
                segments, self._pending_segments = self._pending_segments, []
                failure = self._failure
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
                    self._fence(failure)
                    self.write_errors += len(batch)
            dispatch(self._notify, [(cb, pos) for pos, cb in batch if cb is not None], failure, self.name)
            return fsyncs

    # ------------------------------------------------------------------- reads

    def read_entry(self, position: Position) -> Entry:
        """The entry at ``position``; EntryNotFoundError when there is none or it is damaged."""
        with self._lock:
            self._check_open()
            if not self.has_entry(position):
                raise EntryNotFoundError(f"{self.name}: no readable entry at {position}")
            got, _ = self._read_span(position, 1, None, True)
            if not got:
                raise EntryNotFoundError(f"{self.name}: the entry at {position} is damaged")
            return got[0]

    def read_entries(
        self, start: Position, max_entries: int, max_bytes: int | None = None, *, at_least_one: bool = True
    ) -> list[Entry]:
        """Entries from ``start`` (inclusive) on, across ledgers, never past ``last_confirmed``.

        Stops at ``max_entries`` or before ``max_bytes`` of data would be passed,
        but returns at least one entry when any is readable (unless ``at_least_one``
        is False, which callers that already hold entries use). A damaged entry is
        left out, as if it was not there, and counts against neither limit; every
        cursor is told it is gone (``_skip_damaged``).
        """
        with self._lock:
            self._check_open()
            last = self._last_confirmed
            out: list[Entry] = []
            budget = max_bytes
            position = self._ledgers.ceil(start)
            while len(out) < max_entries and position <= last:
                if position.ledger_id == last.ledger_id:
                    ledger_end = last.entry_id + 1
                else:
                    ledger_end = self._ledgers.count(position.ledger_id)
                run = min(max_entries - len(out), ledger_end - position.entry_id)
                got, passed = self._read_span(position, run, budget, at_least_one and not out)
                out.extend(got)
                if budget is not None:
                    budget -= sum(len(entry.data) for entry in got)
                if passed < run:
                    break
                position = self._ledgers.ceil(Position(position.ledger_id, position.entry_id + passed))
            return out

    def _read_span(
        self, start: Position, count: int, budget: int | None, at_least_one: bool
    ) -> tuple[list[Entry], int]:
        """Up to ``count`` entries of one ledger: from the cache while it has them, then one pread.

        Returns the entries and how many positions they cover from ``start`` (damaged ones
        are passed over, not returned).
        """
        ledger_id, first = start.ledger_id, start.entry_id
        out: list[Entry] = []
        while len(out) < count:
            position = Position(ledger_id, first + len(out))
            data = self._cache.get(self._id, position)
            if data is None:
                break
            if budget is not None and len(data) > budget and (out or not at_least_one):
                return out, len(out)
            out.append(Entry(position, data))
            if budget is not None:
                budget -= len(data)
        passed = len(out)
        if passed < count:
            begin = first + passed
            segment = self._segment_for(ledger_id)
            try:
                datas = segment.read_range(begin, count - passed, budget, at_least_one and not out)
            except CorruptionError:
                return self._read_salvaging(segment, begin, count - passed, budget, at_least_one, out)
            out.extend(Entry(Position(ledger_id, begin + i), data) for i, data in enumerate(datas))
            passed += len(datas)
        return out, passed

    def _read_salvaging(
        self,
        segment: Segment,
        begin: int,
        count: int,
        budget: int | None,
        at_least_one: bool,
        out: list[Entry],
    ) -> tuple[list[Entry], int]:
        """The span from ``begin`` failed its checks: keep its intact entries, pass over the damaged
        ones. ``out`` holds the entries before ``begin`` (from the cache); returns what
        ``_read_span`` does."""
        ledger_id = segment.ledger_id
        passed = len(out)  # the cached entries before ``begin``
        damaged = []
        for i, data in enumerate(segment.read_salvaging(begin, count, budget, at_least_one and not out)):
            if data is None:
                damaged.append(Damage(ledger_id, begin + i, *segment.record_span(begin + i)))
            elif budget is not None and len(data) > budget and out:
                break
            else:
                out.append(Entry(Position(ledger_id, begin + i), data))
                if budget is not None:
                    budget -= len(data)
            passed += 1
        self._note_damage(damaged)
        self._skip_damaged([Position(ledger_id, d.entry_id) for d in damaged if d.entry_id is not None])
        return out, passed

    def _segment_for(self, ledger_id: int) -> Segment:
        if ledger_id == self._current.ledger_id:
            return self._current
        segment = self._readers.get(ledger_id, self._ledgers.count(ledger_id))
        if segment.damage:
            self._note_damage(segment.damage)
            segment.damage = []
        return segment

    # ------------------------------------------------------------------ damage

    def _note_damage(self, damage: Iterable[Damage]) -> None:
        """Count and log (once each) damage found in this managed ledger's files; a run of
        damaged entries in one ledger is one log line."""
        run: list[Damage] = []
        for place in damage:
            if not self.damage.add(place):
                continue
            if place.entry_id is None:
                log.warning("%s: %s", self.name, place.describe())
                continue
            if run and (run[-1].ledger_id, run[-1].entry_id + 1) != (place.ledger_id, place.entry_id):
                self._log_run(run)
                run = []
            run.append(place)
        if run:
            self._log_run(run)

    def _log_run(self, run: list[Damage]) -> None:
        if len(run) == 1:
            log.warning("%s: %s", self.name, run[0].describe())
            return
        first, last = run[0], run[-1]
        log.warning(
            "%s: entries %d:%d..%d:%d are damaged (%d bytes from offset %d of ledger %d's log);"
            " they are skipped",
            self.name,
            first.ledger_id,
            first.entry_id,
            last.ledger_id,
            last.entry_id,
            sum(place.size for place in run),
            first.offset,
            first.ledger_id,
        )

    def _skip_damaged(self, positions: list[Position]) -> None:
        """Damaged entries cannot be delivered: every cursor takes them as acknowledged, so no
        subscription waits on them and backlogs count only what can still arrive."""
        if positions:
            for cursor in [*self._cursors.values(), *self._non_durable]:
                cursor.delete(positions)

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
        """Bytes of all the ledgers' segment data (Pulsar's storageSize)."""
        return sum(info.size_bytes for info in self.ledgers())

    def size_after(self, position: Position) -> int:
        """Estimated bytes of the entries after ``position`` (Pulsar's estimated backlog size):
        whole ledgers after its own, and of its own ledger the share of entries after it."""
        total = 0
        for info in self.ledgers():
            if info.ledger_id > position.ledger_id:
                total += info.size_bytes
            elif info.ledger_id == position.ledger_id and info.entries:
                after = info.entries - (position.entry_id + 1)
                total += info.size_bytes * max(after, 0) // info.entries
        return total

    @property
    def current_ledger_id(self) -> int:
        return self._current.ledger_id

    # ----------------------------------------------------------------- cursors

    def open_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """The durable cursor ``name``, created at the latest or earliest entry if it is new.

        A new cursor's cursor ledger and row are committed at once, so it holds
        retention from the start.
        """
        with self._lock:
            self._check_open()
            cursor = self._cursors.get(name)
            if cursor is not None:
                return cursor
            return self.adopt_cursor(self.prepare_cursor(name, initial_position))

    def prepare_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """A new durable cursor, stored (cursor ledger, first marker, row committed) but not yet in use.

        The slow half of ``open_cursor`` (files, fsyncs, a commit), safe on another thread than
        the owner's and without holding this managed ledger's lock over the I/O, so adds and
        reads go on meanwhile; the owner then calls ``adopt_cursor``.
        """
        if initial_position not in ("earliest", "latest"):
            raise ValueError(f"initial_position must be 'earliest' or 'latest', not {initial_position!r}")
        with self._lock:
            self._check_open()
            if initial_position == "latest":
                mark_delete = self._last_confirmed
            else:
                mark_delete = self._ledgers.previous_position(self._ledgers.ceil(Position.EARLIEST))
        cursor = ManagedCursor(self, name, True, CursorState(mark_delete), self._new_cursor_store(name))
        try:
            cursor.persist()  # the first marker, then the row that points at the cursor ledger
        except BaseException:
            cursor.release(delete=True)
            raise
        return cursor

    def adopt_cursor(self, cursor: ManagedCursor) -> ManagedCursor:
        """Put a cursor from ``prepare_cursor`` in use (owner's thread); returns the one in use.

        If a cursor of that name came into use meanwhile, that one stays: its cursor ledger is
        committed again (the prepared one's commit may have come later) and the prepared one
        is deleted.
        """
        with self._lock:
            try:
                self._check_open()
            except StorageClosedError:
                cursor.release()
                raise
            existing = self._cursors.get(cursor.name)
            if existing is None:
                self._cursors[cursor.name] = cursor
                return cursor
            existing.recommit()
        cursor.release(delete=True)
        return existing

    def new_non_durable_cursor(self, start: Position, name: str | None = None) -> ManagedCursor:
        """A cursor whose first read is at ``start``; never persisted, holds no retention."""
        with self._lock:
            self._check_open()
            if name is None:
                self._non_durable_seq += 1
                name = f"non-durable-{self._non_durable_seq}"
            first = self._ledgers.ceil(start)
            cursor = ManagedCursor(self, name, False, CursorState(self._ledgers.previous_position(first)))
            self._non_durable.add(cursor)
            return cursor

    def cursors(self) -> dict[str, ManagedCursor]:
        """The durable cursors, by name."""
        with self._lock:
            return dict(self._cursors)

    def delete_cursor(self, name: str) -> None:
        """Forget a durable cursor (no-op when unknown); it stops holding retention."""
        with self._lock:
            self._check_open()
            cursor = self._cursors.pop(name, None)
            self._metadata.delete_cursor(self._id, name)
            if cursor is not None:
                cursor.release(delete=True)

    def flush_cursors(self) -> None:
        """Persist every durable cursor whose state changed (each to its cursor ledger, one fsync each)."""
        with self._lock:
            self.persist_cursors(list(self._cursors.values()))

    def persist_cursors(self, cursors: Iterable[ManagedCursor]) -> None:
        """Flush each dirty cursor; one that fails does not stop the others (its error is raised after)."""
        failure: Exception | None = None
        with self._lock:
            for cursor in cursors:
                if cursor.durable and cursor.dirty and self._cursors.get(cursor.name) is cursor:
                    try:
                        cursor.persist()
                    except Exception as exc:
                        if cursor.name not in self._cursor_flush_failing:  # once per episode
                            self._cursor_flush_failing.add(cursor.name)
                            log.error("%s: flushing cursor %s failed: %s", self.name, cursor.name, exc)
                        failure = failure or exc
                    else:
                        if cursor.name in self._cursor_flush_failing:
                            self._cursor_flush_failing.discard(cursor.name)
                            log.warning("%s: flushing cursor %s works again", self.name, cursor.name)
        if failure is not None:
            raise failure

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
            if self._cursors:
                slowest = min(c.mark_delete_position for c in self._cursors.values())
            else:
                slowest = self._last_confirmed
            closed = [self._infos[ledger_id] for ledger_id in self._ledgers.ids()[:-1]]
            consumed = consumed_ledgers(closed, slowest)
            cfg = self._config
            doomed = [
                info.ledger_id
                for info in past_retention(
                    consumed,
                    cfg.retention_time_seconds if retention_time_seconds is None else retention_time_seconds,
                    cfg.retention_size_bytes if retention_size_bytes is None else retention_size_bytes,
                    time.time(),
                )
            ]
            if not doomed:
                return []
            self._metadata.delete_ledgers(doomed)
            for ledger_id in doomed:
                self._ledgers.remove(ledger_id)
                del self._infos[ledger_id]
                self._readers.discard(ledger_id)
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
            try:
                self.flush_cursors()
            finally:
                for cursor in self._cursors.values():
                    cursor.release()
            self._syncer.count(self.sync_round())
        finally:
            with self._lock:
                current = self._current
                try:
                    self._syncer.count(current.close())
                except OSError as exc:
                    log.error("%s: closing ledger %d failed: %s", self.name, current.ledger_id, exc)
                self._readers.close_all()
                info = self._infos[current.ledger_id]
                self._metadata.update_ledger(
                    replace(info, entries=current.entries, size_bytes=current.size_bytes)
                )
            self._cache.invalidate(self._id)
            self._on_close(self)
