"""ManagedCursorContainer: the cursors of one managed ledger, from creation to release.

Pulsar's ``ManagedCursorContainer`` keeps a ledger's cursors ordered by mark-delete position
so that the slowest is found at once. Here a mark-delete moves on every acknowledgment, on the
owner's thread, while the slowest one is asked for only when ledgers are trimmed: the container
finds it by looking at every durable cursor then, and an acknowledgment pays nothing for an
order kept up to date.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.storage.config import StorageConfig
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.cursor_state import CursorState
from magnetar.storage.cursor_stores import CursorStores
from magnetar.storage.damage import DamageLog
from magnetar.storage.errors import StorageClosedError
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.owner_ref import OwnerRef
from magnetar.storage.position import Position
from magnetar.storage.virtual_cursors import VirtualCursorStore, VirtualCursorStores

if TYPE_CHECKING:
    from magnetar.storage.managed_ledger import ManagedLedger


class ManagedCursorContainer:
    """A managed ledger's durable cursors (by name, stored, holding retention), the non-durable
    ones it made for readers (held weakly: told of damaged entries while they live), and the
    virtual cursors kept on each cursor (``virtual_cursors.py``).

    It makes the cursor ledgers (``CursorStores``) and virtual cursor stores (``VirtualCursorStores``) of the
    managed ledger ``ml_id``, shares the managed ledger's lock, and refuses new cursors once
    ``check_open`` raises.
    """

    def __init__(
        self,
        ledger: ManagedLedger,
        ml_id: int,
        directory: Path,
        config: StorageConfig,
        metadata: MetadataStore,
        damage: DamageLog,
        lock: threading.RLock,
        check_open: Callable[[], None],
    ) -> None:
        self._owner = OwnerRef(ledger, "managed ledger", ledger.name)
        self._ml_id = ml_id
        self._lock = lock
        self._check_open = check_open
        self._metadata = metadata
        self._stores = CursorStores(ledger.name, ml_id, directory, config, metadata, damage)
        self._virtual_cursors = VirtualCursorStores(metadata, ml_id, ledger.name)
        self._durable: dict[str, ManagedCursor] = {}
        #: Readers' cursors, made at the first (a WeakSet costs 0.7 KiB, per managed ledger).
        self._non_durable: weakref.WeakSet[ManagedCursor] | None = None
        self._non_durable_seq = 0

    @property
    def _ledger(self) -> ManagedLedger:
        return self._owner()

    def load(self) -> None:
        """Recover each durable cursor from its cursor ledger (those in the earlier JSON form are
        migrated); cursor ledgers no cursor names are removed (``CursorStores.remove_orphans``)."""
        stored = self._metadata.cursors(self._ml_id)
        self._stores.remove_orphans(stored)
        for name, row in stored.items():
            self._durable[name] = ManagedCursor(
                self._ledger, name, True, row.state, self._stores.open(name, row)
            )
        self.flush()  # writes migrated cursors' first markers and keeps any clamping recovery did

    # ------------------------------------------------------------ durable cursors

    def open(self, name: str, initial_position: str) -> ManagedCursor:
        """The durable cursor ``name``, created at the latest or earliest entry if it is new.

        A new cursor's cursor ledger and row are committed at once, so it holds
        retention from the start.
        """
        with self._lock:
            self._check_open()
            cursor = self._durable.get(name)
            if cursor is not None:
                return cursor
            return self.adopt(self.prepare(name, initial_position))

    def prepare(self, name: str, initial_position: str) -> ManagedCursor:
        """A new durable cursor, stored (cursor ledger, first marker, row committed) but not yet in use.

        The slow half of ``open`` (files, fsyncs, a commit), safe on another thread than the
        owner's and without holding the managed ledger's lock over the I/O, so adds and reads go
        on meanwhile; the owner then calls ``adopt``.
        """
        if initial_position not in ("earliest", "latest"):
            raise ValueError(f"initial_position must be 'earliest' or 'latest', not {initial_position!r}")
        ledger = self._ledger
        with self._lock:
            self._check_open()
            if initial_position == "latest":
                mark_delete = ledger.last_confirmed
            else:
                mark_delete = ledger.previous_position(ledger.ceil_position(Position.EARLIEST))
        cursor = ManagedCursor(ledger, name, True, CursorState(mark_delete), self._stores.create(name))
        try:
            cursor.persist()  # the first marker, then the row that points at the cursor ledger
        except BaseException:
            cursor.release(delete=True)
            raise
        return cursor

    def adopt(self, cursor: ManagedCursor) -> ManagedCursor:
        """Put a cursor from ``prepare`` in use (owner's thread); returns the one in use.

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
            existing = self._durable.get(cursor.name)
            if existing is None:
                self._durable[cursor.name] = cursor
                return cursor
            existing.recommit()
        cursor.release(delete=True)
        return existing

    def any(self) -> bool:
        """Whether any cursor could read what is added next: a durable one, or a reader's still
        alive. Without one an added entry is not worth its place in the entry cache."""
        return bool(self._durable) or bool(self._non_durable)

    def durable(self) -> dict[str, ManagedCursor]:
        """The durable cursors, by name."""
        with self._lock:
            return dict(self._durable)

    def delete(self, name: str) -> None:
        """Forget a durable cursor (no-op if unknown) and its virtual cursors: it holds retention no more."""
        with self._lock:
            self._check_open()
            cursor = self._durable.pop(name, None)
            self._metadata.delete_cursor(self._ml_id, name)  # its virtual cursors too
            self._virtual_cursors.forget(name)
            if cursor is not None:
                cursor.release(delete=True)

    def slowest_mark_delete(self) -> Position | None:
        """The mark-delete position of the durable cursor furthest behind; None without one."""
        with self._lock:
            if not self._durable:
                return None
            return min(c.mark_delete_position for c in self._durable.values())

    # ------------------------------------------------------------------ flushing

    def flush(self) -> None:
        """Persist every durable cursor whose state changed (each to its cursor ledger, one fsync each),
        then the changed virtual cursors of every cursor (``virtual_cursors.py``: one write for all)."""
        with self._lock:
            try:
                self.persist(list(self._durable.values()))
            finally:
                self._virtual_cursors.flush()

    def persist(self, cursors: Iterable[ManagedCursor]) -> None:
        """Flush each dirty cursor; one that fails does not stop the others (its error is raised after)."""
        with self._lock:
            self._stores.persist(cursors, self._durable)

    def virtual_cursors(self, cursor: str) -> VirtualCursorStore:
        """The virtual cursors kept on the cursor ``cursor`` (written by ``flush``)."""
        with self._lock:
            self._check_open()
            return self._virtual_cursors.store(cursor)

    def close(self) -> None:
        """Flush, then release every durable cursor (their files close; their rows stay)."""
        try:
            self.flush()
        finally:
            for cursor in self._durable.values():
                cursor.release()

    # ------------------------------------------------------- non-durable cursors

    def new_non_durable(self, start: Position, name: str | None) -> ManagedCursor:
        """A cursor whose first read is at ``start``; never persisted, holds no retention."""
        ledger = self._ledger
        with self._lock:
            self._check_open()
            if name is None:
                self._non_durable_seq += 1
                name = f"non-durable-{self._non_durable_seq}"
            first = ledger.ceil_position(start)
            cursor = ManagedCursor(ledger, name, False, CursorState(ledger.previous_position(first)))
            if self._non_durable is None:
                self._non_durable = weakref.WeakSet()
            self._non_durable.add(cursor)
            return cursor

    def skip_damaged(self, positions: list[Position]) -> None:
        """Damaged entries cannot be delivered: every cursor takes them as acknowledged, so no
        subscription waits on them and backlogs count only what can still arrive."""
        if positions:
            for cursor in [*self._durable.values(), *(self._non_durable or ())]:
                cursor.delete(positions)
