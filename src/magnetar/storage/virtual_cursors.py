"""Virtual cursors kept on a cursor: many small acknowledged positions, by name, written together.

A cursor (a subscription) may carry many *virtual cursors*, each a name with a mark-delete
position, the entries acknowledged past it and the batches acknowledged in part: the broker
keeps one per consumer of a broadcast subscription (``broker/dispatchers/virtual_cursor.py``),
so that a consumer coming back after a restart resumes where it was. Storage knows nothing of
consumers: it keeps ``(managed ledger, cursor, name) -> VirtualCursorState``.

Writes are batched: callers ``put`` and ``remove`` states in memory as often as they like, and
``ManagedLedger.flush_cursors`` writes every change of every store of the managed ledger in one
SQLite transaction (one commit, one WAL fsync), however many virtual cursors changed. They are
stored in buckets (``virtual_cursor_buckets``: a fixed bucket per name, one row per bucket), so
100K virtual cursors that move between two flushes cost one write of ~1,000 rows, not 100K
writes nor 100K rows. What was changed after the last flush is lost by a crash: the virtual
cursors come back as of that flush.

Stored as before the names changed (these were "places", kept in "place pages"): the tables
``places`` and ``place_pages`` and the bytes of a state are unchanged, so existing data
directories open as they are.
"""

from __future__ import annotations

import logging
import struct
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.storage import virtual_cursor_buckets as buckets
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.storage.metadata_store import MetadataStore

log = logging.getLogger(__name__)

_HEAD = struct.Struct("<BqqII")  # version, mark-delete ledger and entry, acked count, partial count
_PARTIAL = struct.Struct("<qqI")  # batch entry's ledger and entry, word count
_VERSION = 1
#: A state that carries the resets of its subscription its writer knew of (``epoch``): version 1's
#: bytes, then the count (an unsigned 64-bit word). A state with epoch 0 is written as version 1.
_VERSION_WITH_EPOCH = 2
_EPOCH = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class VirtualCursorState:
    """What is stored of one virtual cursor: everything at or before ``mark_delete`` is
    acknowledged, and so are ``acked``; ``partial`` holds batch entries acknowledged in part, as
    unsigned 64-bit words in which a set bit is a message still unacknowledged."""

    mark_delete: Position
    acked: tuple[Position, ...] = ()
    partial: tuple[tuple[Position, tuple[int, ...]], ...] = ()
    #: How many resets (seeks) of the subscription its writer knew of when it wrote the state
    #: (the spread's count, docs/architecture.md; 0 for one broker alone): a state written before
    #: a seek is not resumed from after it.
    epoch: int = 0


def encode_state(state: VirtualCursorState) -> bytes:
    """A compact binary form: a header, the acked positions as int64 pairs, then the batches."""
    md = state.mark_delete
    version = _VERSION_WITH_EPOCH if state.epoch else _VERSION
    parts = [_HEAD.pack(version, md.ledger_id, md.entry_id, len(state.acked), len(state.partial))]
    if state.acked:
        parts.append(array("q", [n for p in state.acked for n in p]).tobytes())
    for position, words in state.partial:
        parts.append(_PARTIAL.pack(position.ledger_id, position.entry_id, len(words)))
        parts.append(array("Q", words).tobytes())
    if state.epoch:
        parts.append(_EPOCH.pack(state.epoch))
    return b"".join(parts)


def decode_state(data: bytes) -> VirtualCursorState:
    """The inverse of ``encode_state``; raises ValueError on anything malformed."""
    if len(data) < _HEAD.size:
        raise ValueError("virtual cursor state too short")
    version, md_ledger, md_entry, n_acked, n_partial = _HEAD.unpack_from(data)
    epoch = 0
    if version == _VERSION_WITH_EPOCH:
        if len(data) < _HEAD.size + _EPOCH.size:
            raise ValueError("virtual cursor state truncated in its epoch")
        (epoch,) = _EPOCH.unpack_from(data, len(data) - _EPOCH.size)
        if epoch == 0:
            raise ValueError("a virtual cursor state of version 2 with epoch 0")
        data = data[: -_EPOCH.size]
    elif version != _VERSION:
        raise ValueError(f"unknown virtual cursor state version {version}")
    offset = _HEAD.size
    end = offset + 16 * n_acked
    if end > len(data):
        raise ValueError("virtual cursor state truncated in its acked positions")
    numbers = array("q")
    numbers.frombytes(data[offset:end])
    acked = tuple(Position(numbers[i], numbers[i + 1]) for i in range(0, len(numbers), 2))
    offset = end
    partial = []
    for _ in range(n_partial):
        if offset + _PARTIAL.size > len(data):
            raise ValueError("virtual cursor state truncated in its batches")
        ledger_id, entry_id, n_words = _PARTIAL.unpack_from(data, offset)
        offset += _PARTIAL.size
        end = offset + 8 * n_words
        if end > len(data):
            raise ValueError("virtual cursor state truncated in a batch's words")
        words = array("Q")
        words.frombytes(data[offset:end])
        partial.append((Position(ledger_id, entry_id), tuple(words)))
        offset = end
    if offset != len(data):
        raise ValueError("trailing bytes after a virtual cursor state")
    return VirtualCursorState(Position(md_ledger, md_entry), acked, tuple(partial), epoch)


@dataclass(slots=True)
class BucketChanges:
    """What one flush writes for a cursor: with ``cleared`` its stored virtual cursors are deleted
    first; ``write`` holds ``(bucket, bytes)``, ``gone`` the buckets left empty; ``puts`` and
    ``deletes`` count the virtual cursors changed."""

    cleared: bool
    write: list[tuple[int, bytes]]
    gone: list[int]
    puts: int
    deletes: int


class VirtualCursorStore:
    """The virtual cursors of one cursor, kept in buckets (``virtual_cursor_buckets``): changes
    are held in memory until the managed ledger flushes them, and then each bucket they touch is
    written whole.

    The store holds every stored state, encoded (read on first use), since a bucket is rewritten
    whole. Not thread-safe: use it from the thread that owns the managed ledger.
    """

    def __init__(self, metadata: MetadataStore, ml_id: int, cursor: str) -> None:
        self._metadata = metadata
        self._ml_id = ml_id
        self.cursor = cursor
        #: Changes since the last flush: a state to write, or None to delete it.
        self._changes: dict[str, VirtualCursorState | None] = {}
        #: The stored states are all to be deleted before the buckets are written (``clear``, or
        #: states found stored one per row, as before buckets).
        self._cleared = False
        #: bucket -> its states (name -> encoded state), with every flushed change (None until read).
        self._buckets: dict[int, buckets.Bucket] | None = None
        #: Buckets whose last write failed: written at the next flush.
        self._unwritten: set[int] = set()
        # figures
        self.flushes = 0  # storage writes that carried this store's changes
        self.written = 0
        self.deleted = 0
        self.buckets_written = 0

    def __repr__(self) -> str:
        return f"VirtualCursorStore({self.cursor!r}, changes={len(self._changes)}, cleared={self._cleared})"

    @property
    def dirty(self) -> bool:
        return self._cleared or bool(self._changes) or bool(self._unwritten)

    def _stored(self) -> dict[int, buckets.Bucket]:
        """The buckets as stored, read once. A bucket that does not decode is left out (logged): its
        consumers start over from the cursor's own mark-delete position, which is where a new one
        starts. States stored one per row (before buckets) are taken in, to be written as buckets,
        and their rows deleted, at the next flush."""
        stored = self._buckets
        if stored is not None:
            return stored
        stored = self._buckets = {}
        for number, data in self._metadata.virtual_cursor_buckets(self._ml_id, self.cursor):
            try:
                stored[number] = buckets.Bucket(buckets.decode_bucket(data))
            except ValueError as exc:
                log.warning(
                    "cursor %s: virtual cursor bucket %d is damaged and left out: %s",
                    self.cursor,
                    number,
                    exc,
                )
        rows = self._metadata.unbucketed_virtual_cursors(self._ml_id, self.cursor)
        if rows:
            for name, data in rows:
                stored.setdefault(buckets.bucket_of(name), buckets.Bucket()).put(name, data)
            self._cleared = True
        return stored

    def load(self) -> dict[str, VirtualCursorState]:
        """The states as stored (as of the last flush), changes not yet flushed on top.

        A stored state that does not decode is left out (logged), as a damaged bucket is.
        """
        states: dict[str, VirtualCursorState] = {}
        for bucket in self._stored().values():
            for name, data in bucket.states.items():
                try:
                    states[name] = decode_state(data)
                except ValueError as exc:
                    log.warning(
                        "cursor %s: virtual cursor %r is damaged and left out: %s", self.cursor, name, exc
                    )
        for name, state in self._changes.items():
            if state is None:
                states.pop(name, None)
            else:
                states[name] = state
        return states

    def put(self, name: str, state: VirtualCursorState) -> None:
        """Store ``state`` under ``name`` at the next flush."""
        self._changes[name] = state

    def remove(self, name: str) -> None:
        """Delete the virtual cursor ``name`` at the next flush."""
        self._changes[name] = None

    def clear(self) -> None:
        """Delete every virtual cursor at the next flush (a seek starts everyone over)."""
        self._buckets = {}
        self._unwritten.clear()
        self._changes.clear()
        self._cleared = True

    def take_changes(self) -> BucketChanges:
        """What the next flush writes, emptied here: the buckets in memory hold the changes now."""
        stored = self._stored()
        cleared = self._cleared
        touched = set(stored) if cleared else set(self._unwritten)
        # Consumers that keep up share one state object: each object is encoded once.
        encoded: dict[int, bytes] = {}
        puts = deletes = 0
        bucket_of = buckets.bucket_of
        for name, state in self._changes.items():
            number = bucket_of(name)
            bucket = stored.get(number)
            if state is None:
                if bucket is not None and bucket.remove(name):
                    touched.add(number)
                    deletes += 1
                continue
            data = encoded.get(id(state))
            if data is None:
                data = encoded[id(state)] = encode_state(state)
            if bucket is None:
                bucket = stored[number] = buckets.Bucket()
            bucket.put(name, data)
            touched.add(number)
            puts += 1
        write, gone = [], []
        for n in sorted(touched):
            bucket = stored.get(n)
            if bucket:
                write.append((n, bucket.encode()))
            else:
                stored.pop(n, None)
                gone.append(n)
        self._changes = {}
        self._cleared = False
        self._unwritten = set()
        return BucketChanges(cleared, write, gone, puts, deletes)

    def give_back(self, changes: BucketChanges) -> None:
        """Their write failed: the buckets in memory still hold them; write those buckets (and the
        clearing) at the next flush."""
        self._cleared = self._cleared or changes.cleared
        self._unwritten.update(n for n, _ in changes.write)
        self._unwritten.update(changes.gone)

    def count_flush(self, changes: BucketChanges) -> None:
        self.flushes += 1
        self.written += changes.puts
        self.deleted += changes.deletes
        self.buckets_written += len(changes.write)

    def stats(self) -> dict[str, int]:
        return {
            "virtual_cursor_flushes": self.flushes,
            "virtual_cursors_written": self.written,
            "virtual_cursors_deleted": self.deleted,
            "virtual_cursor_buckets_written": self.buckets_written,
            "virtual_cursor_changes_pending": len(self._changes),
        }


class VirtualCursorStores:
    """A managed ledger's virtual cursor stores, by cursor name, flushed together in one storage write."""

    def __init__(self, metadata: MetadataStore, ml_id: int, name: str) -> None:
        self._metadata = metadata
        self._ml_id = ml_id
        self._name = name
        self._stores: dict[str, VirtualCursorStore] = {}
        self._failing = False  # a flush failed: logged once until one works again

    def store(self, cursor: str) -> VirtualCursorStore:
        store = self._stores.get(cursor)
        if store is None:
            store = self._stores[cursor] = VirtualCursorStore(self._metadata, self._ml_id, cursor)
        return store

    def forget(self, cursor: str) -> None:
        """Drop a cursor's store from memory (its stored states go with the cursor's row)."""
        self._stores.pop(cursor, None)

    def flush(self) -> None:
        """Write every store's changes in one transaction; on failure they are kept for the next."""
        dirty = [store for store in self._stores.values() if store.dirty]
        if not dirty:
            return
        taken = [(store, store.take_changes()) for store in dirty]
        try:
            self._metadata.write_virtual_cursors(
                self._ml_id, [(store.cursor, c.cleared, c.write, c.gone) for store, c in taken]
            )
        except Exception as exc:
            for store, changes in taken:
                store.give_back(changes)
            if not self._failing:
                self._failing = True
                log.error("%s: writing virtual cursors failed: %s", self._name, exc)
            raise
        if self._failing:
            self._failing = False
            log.warning("%s: writing virtual cursors works again", self._name)
        for store, changes in taken:
            store.count_flush(changes)
