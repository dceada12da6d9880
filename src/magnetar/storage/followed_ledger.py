"""A managed ledger that another process writes, read here: a follower's view of a topic it
serves without owning it (``docs/architecture.md``, the spread).

The owner appends; this process only reads the same files, so it never recovers, truncates,
rolls over, trims or moves anything aside. It knows how far the ledger is durable only when told
(``follow``: the owner tells its followers each entry it made durable), and learns the ledgers from
the metadata store: closed ones with their entry counts, the open one (the last) by reading its
log forward as far as it is told (``Segment.follow``; the owner's index lags its log).

The reading API is ``ManagedLedger``'s (it is one, for everything that reads one: cursors, a
broadcast dispatcher); every write is refused. Virtual cursors kept here are stored under a key
of this follower's own (``follower_key``), so that owner and followers never write one row.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from magnetar.storage.callbacks import DurableCallback, Notify
from magnetar.storage.config import StorageConfig
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.cursor_state import CursorState
from magnetar.storage.damage import Damage, DamageLog
from magnetar.storage.entry import EntryData
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.errors import MissingLedgerError, StorageError
from magnetar.storage.ledger_files import OPEN_LEDGER_FILES, try_hold
from magnetar.storage.ledger_info import LedgerInfo
from magnetar.storage.ledger_list import LedgerList
from magnetar.storage.ledger_reads import LedgerReader, ReadableLedger
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.metadata_store import ManagedLedgerRecord, MetadataStore
from magnetar.storage.metadata_virtual_cursors import follower_key
from magnetar.storage.offloaded_segment import OffloadedSegment
from magnetar.storage.position import Position
from magnetar.storage.segment import Segment
from magnetar.storage.segment_readers import SegmentReaders
from magnetar.storage.tiered_reads import TieredReads
from magnetar.storage.virtual_cursors import VirtualCursorStore, VirtualCursorStores
from magnetar.storage.virtual_cursors_elsewhere import VirtualCursorsElsewhere

log = logging.getLogger(__name__)


class ReadOnlyLedgerError(StorageError):
    """A write asked of a followed ledger: only its owner writes it."""


class FollowedLedger(ManagedLedger):
    """Another process's managed ledger, read as it grows; ``follow`` moves ``last_confirmed``."""

    def __init__(
        self,
        record: ManagedLedgerRecord,
        directory: Path,
        config: StorageConfig,
        metadata: MetadataStore,
        cache: EntryCache,
        follower: str,
        on_close: Callable[[ManagedLedger], None],
        notify: Notify | None = None,
        tiered: TieredReads | None = None,
    ) -> None:
        """``follower``: who reads (a worker's name), in the key of the virtual cursors kept here;
        ``notify`` and ``tiered`` as a managed ledger's (offloaded ledgers are read through them)."""
        # Not ManagedLedger.__init__: that one recovers the files it opens, and this one must not.
        self.name = record.name
        self._id = record.ml_id
        self._dir = directory
        self._config = config
        self._metadata = metadata
        self._cache = cache
        self._on_close = on_close
        self.follower = follower
        self._lock = threading.RLock()
        self._closed = False
        self._readers = SegmentReaders(directory)
        self.damage = DamageLog()
        self._reader = LedgerReader(self._id, cache, self._segment_for, self._damaged_read)
        self._properties = metadata.properties(record.ml_id)
        self._stores = VirtualCursorStores(metadata, self._id, self.name)
        self._notify = notify
        #: Offloaded ledgers (tiered storage) are read from their objects, as the owner reads them.
        self._tiered = tiered
        self._offloaded: dict[int, OffloadedSegment] = {}
        self.on_offloaded_data: Callable[[], None] | None = None
        self._compacted: Sequence[Position] = ()
        #: The ledger the owner appends to (the last one) and its files as far as followed.
        self._following: Segment | None = None
        self._infos: dict[int, LedgerInfo] = {}
        self._ledgers = LedgerList()
        self._last_confirmed = self._last_added = Position(-1, -1)
        self._load_ledgers()

    def __repr__(self) -> str:
        return f"FollowedLedger({self.name!r}, last_confirmed={self._last_confirmed})"

    # ------------------------------------------------------------------ following

    def follow(self, position: Position) -> bool:
        """The owner made everything up to ``position`` durable: it becomes readable here. False
        when it was known already (a notice repeated, or older than the last)."""
        with self._lock:
            self._check_open()
            if position <= self._last_confirmed:
                return False
            if position.ledger_id not in self._ledgers or position.ledger_id != self._ledgers.last_id:
                self._load_ledgers()  # a rollover (or several) since: the new ledgers' rows
            if position.ledger_id == self._ledgers.last_id:
                self._ledgers.set_count(position.ledger_id, position.entry_id + 1)
            self._last_confirmed = self._last_added = position
            return True

    def refresh(self) -> None:
        """Read the ledger list again: the ledgers the owner trimmed since are forgotten (a
        follower does so now and then; reads never go behind the owner's stored cursor)."""
        with self._lock:
            self._check_open()
            self._load_ledgers()

    def _load_ledgers(self) -> None:
        """The ledgers from the metadata store: closed ones as stored, the last one open (its
        count is what ``follow`` was told). Ledgers trimmed by the owner are forgotten."""
        rows = self._metadata.ledgers(self._id)
        known = self._ledgers
        ledgers = LedgerList()
        infos: dict[int, LedgerInfo] = {}
        for n, info in enumerate(rows):
            last = n == len(rows) - 1
            entries = info.entries if info.closed else 0
            if last and not info.closed:
                entries = known.count(info.ledger_id) if info.ledger_id in known else 0
            ledgers.append(info.ledger_id, entries)
            infos[info.ledger_id] = info
        for gone in set(known.ids()) - set(infos):
            self._readers.discard(gone)
        following = self._following
        if following is not None and (not rows or following.ledger_id != rows[-1].ledger_id):
            following.close()  # no longer the open one: read as a closed ledger from now on
            self._following = None
        self._ledgers, self._infos = ledgers, infos
        if rows and self._last_confirmed < Position(rows[0].ledger_id, -1):
            self._last_confirmed = self._last_added = Position(rows[0].ledger_id, -1)

    def _segment_for(self, ledger_id: int) -> ReadableLedger:
        if ledger_id == self._ledgers.last_id and not self._infos[ledger_id].closed:
            segment = self._following
            if segment is None or segment.closed:
                segment = self._following = Segment.open_follow(self._dir, ledger_id)
                OPEN_LEDGER_FILES.opened(self, self._files_open())
            else:
                OPEN_LEDGER_FILES.used(self)
            count = self._ledgers.count(ledger_id)
            if not segment.follow(count):
                raise MissingLedgerError(
                    f"ledger {ledger_id}: fewer than {count} records yet", ledger_id, count
                )
            return segment
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

    def _damaged_read(self, damaged: list[Damage]) -> None:
        self._note_damage(damaged)  # the owner's cursors are the owner's to move

    # ------------------------------------------------------------------ what a reader asks

    def ledgers(self) -> list[LedgerInfo]:
        with self._lock:
            infos = [self._infos[ledger_id] for ledger_id in self._ledgers.ids()]
            if infos and not infos[-1].closed:
                infos[-1] = replace(infos[-1], entries=self._ledgers.count(infos[-1].ledger_id))
            return infos

    @property
    def current_ledger_id(self) -> int:
        return self._ledgers.last_id

    @property
    def writable(self) -> bool:
        return False

    def check_writable(self) -> None:
        raise ReadOnlyLedgerError(f"{self.name} is written by its owner only")

    def virtual_cursors(self, cursor: str) -> VirtualCursorStore:
        """This follower's virtual cursors on ``cursor``, apart from the owner's and other followers'."""
        with self._lock:
            self._check_open()
            return self._stores.store(follower_key(cursor, self.follower))

    def virtual_cursors_elsewhere(self, cursor: str) -> VirtualCursorsElsewhere:
        """The virtual cursors the owner and the other followers keep on ``cursor``."""
        return VirtualCursorsElsewhere(self._metadata, self._id, cursor, follower_key(cursor, self.follower))

    def flush_cursors(self) -> None:
        """Write the changed virtual cursors kept here (this follower's own rows)."""
        with self._lock:
            self._stores.flush()

    def forget_cursor(self, cursor: str) -> None:
        """The owner deleted ``cursor`` (an unsubscribe), every follower's rows with it: what is
        kept here for it is dropped unwritten."""
        with self._lock:
            self._stores.forget(follower_key(cursor, self.follower))

    # ------------------------------------------------------------------ files

    def _files_open(self) -> int:
        following = self._following
        return (0 if following is None or following.closed else 1) + self._readers.open_count

    def park(self) -> bool:
        """Close the files (``ledger_files``); they open again on the next read."""
        if not try_hold(self._lock):
            return False
        try:
            if self._following is not None:
                self._following.close()
                self._following = None
            self._readers.close_all()
            OPEN_LEDGER_FILES.closed(self)
            return True
        finally:
            self._lock.release()

    def close(self) -> None:
        """Write the virtual cursors kept here and close the files. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._stores.flush()
        finally:
            with self._lock:
                if self._following is not None:
                    self._following.close()
                self._readers.close_all()
                OPEN_LEDGER_FILES.closed(self)
            self._on_close(self)

    # ------------------------------------------------------------------ writes: the owner's

    def add_entry(self, data: EntryData | bytearray, on_durable: DurableCallback | None = None) -> Position:
        raise ReadOnlyLedgerError(f"{self.name} is written by its owner only")

    def sync_round(self) -> int:
        return 0

    def trim(
        self, retention_time_seconds: float | None = None, retention_size_bytes: int | None = None
    ) -> list[int]:
        return []  # the owner trims

    def open_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        raise ReadOnlyLedgerError(f"{self.name}: durable cursors are the owner's")

    def prepare_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        raise ReadOnlyLedgerError(f"{self.name}: durable cursors are the owner's")

    def new_non_durable_cursor(self, start: Position, name: str | None = None) -> ManagedCursor:
        return self.cursor_at(self.previous_position(self.ceil_position(start)), name or "follower")

    def cursor_at(self, mark_delete: Position, name: str) -> ManagedCursor:
        """A cursor kept in memory only, with everything up to ``mark_delete`` acknowledged (the
        owner's stored cursor, as the owner said it): a follower's subscription holds its
        consumers' floor there, and tells the owner."""
        return ManagedCursor(self, name, False, CursorState(mark_delete))

    def cursors(self) -> dict[str, ManagedCursor]:
        return {}

    def delete_cursor(self, name: str) -> None:
        raise ReadOnlyLedgerError(f"{self.name}: durable cursors are the owner's")

    def persist_cursors(self, cursors: Iterable[ManagedCursor]) -> None:
        return

    def set_property(self, key: str, value: str) -> None:
        raise ReadOnlyLedgerError(f"{self.name} is written by its owner only")

    def delete_property(self, key: str) -> None:
        raise ReadOnlyLedgerError(f"{self.name} is written by its owner only")
