"""The cursor ledgers of one managed ledger's durable cursors (``CursorStore``, PIP 81): made for
a new cursor, opened for a stored one (damage reported, an owner name written where it was
missing), and the orphans a crash left removed when the managed ledger opens."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.storage.config import StorageConfig
from magnetar.storage.cursor_ledger import (
    CURSORS_DIR,
    cursor_ledger_ids,
    cursor_ledger_paths,
    delete_cursor_ledger_files,
    read_owner,
    write_owner,
)
from magnetar.storage.cursor_store import CursorStore
from magnetar.storage.damage import DamageLog
from magnetar.storage.metadata_store import MetadataStore, StoredCursor
from magnetar.storage.orphans import move_aside
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.storage.cursor import ManagedCursor

log = logging.getLogger(__name__)


class CursorStores:
    """Makes and opens the cursor ledgers under ``<managed ledger dir>/cursors``."""

    def __init__(
        self,
        name: str,
        ml_id: int,
        directory: Path,
        config: StorageConfig,
        metadata: MetadataStore,
        damage: DamageLog,
    ) -> None:
        self.name = name
        self._ml_id = ml_id
        self._ml_directory = directory
        self._config = config
        self._metadata = metadata
        self._damage = damage
        #: Cursors whose last flush failed (logged once per episode); a dict as a set, as an empty
        #: dict costs a quarter of an empty set (every managed ledger has one: issue 40).
        self._flush_failing: dict[str, None] = {}

    @property
    def directory(self) -> Path:
        """The cursor ledgers' directory: a path made when used, not kept (about 300 bytes for
        each of 100,000 loaded topics, most of which never touch a cursor ledger)."""
        return self._ml_directory / CURSORS_DIR

    def remove_orphans(self, stored: dict[str, StoredCursor]) -> None:
        """Delete or move aside the cursor ledgers no row of ``stored`` names.

        One with an id this metadata store handed out is what a crash while creating, rolling or
        deleting a cursor leaves (its state is in the cursor ledger the row names, or the cursor
        was never confirmed, or it was deleted): it is deleted. One with a higher id comes from
        elsewhere and is moved aside.
        """
        in_use = {row.cursor_ledger for row in stored.values() if row.cursor_ledger is not None}
        last_id = self._metadata.last_ledger_id()
        for orphan in sorted(cursor_ledger_ids(self.directory) - in_use):
            if orphan <= last_id:
                delete_cursor_ledger_files(self.directory, orphan)
                continue
            for path in cursor_ledger_paths(self.directory, orphan):
                if path.exists():
                    reason = f"{self.name}: no cursor names this cursor ledger"
                    move_aside(self._config.data_dir, path, reason)

    def persist(self, cursors: Iterable[ManagedCursor], in_use: dict[str, ManagedCursor]) -> None:
        """Flush each of ``cursors`` that is durable, dirty and in use; one that fails does not stop
        the others (the first error is raised after)."""
        failure: Exception | None = None
        for cursor in cursors:
            if cursor.durable and cursor.dirty and in_use.get(cursor.name) is cursor:
                try:
                    cursor.persist()
                except Exception as exc:
                    if cursor.name not in self._flush_failing:  # once per episode
                        self._flush_failing[cursor.name] = None
                        log.error("%s: flushing cursor %s failed: %s", self.name, cursor.name, exc)
                    failure = failure or exc
                else:
                    if cursor.name in self._flush_failing:
                        del self._flush_failing[cursor.name]
                        log.warning("%s: flushing cursor %s works again", self.name, cursor.name)
        if failure is not None:
            raise failure

    def create(self, cursor: str) -> CursorStore:
        """A new cursor ledger for the cursor ``cursor``."""
        return CursorStore.create(
            self.directory,
            self._metadata.allocate_ledger_id,
            self._committer(cursor),
            owner=cursor,
            memory_limit=self._config.max_individual_ack_cache_bytes_per_cursor,
            min_roll_bytes=self._config.cursor_ledger_min_roll_bytes,
        )

    def open(self, cursor: str, row: StoredCursor) -> CursorStore:
        """The stored cursor's cursor ledger; a new one for a cursor still in the earlier JSON form."""
        if row.cursor_ledger is None:
            log.info("%s: moving cursor %s from the earlier JSON form to a cursor ledger", self.name, cursor)
            return self.create(cursor)
        store = CursorStore.open(
            self.directory,
            row.cursor_ledger,
            self._metadata.allocate_ledger_id,
            self._committer(cursor),
            owner=cursor,
            memory_limit=self._config.max_individual_ack_cache_bytes_per_cursor,
            min_roll_bytes=self._config.cursor_ledger_min_roll_bytes,
        )
        if store.damage:
            self._report_damage(cursor, row, store)
        if read_owner(self.directory, row.cursor_ledger) is None:  # written before names were kept
            write_owner(self.directory, row.cursor_ledger, cursor)
        if store.recovered is None:
            log.error(
                "%s: cursor %s: no intact marker in cursor ledger %d; starting over from mark-delete %s",
                self.name,
                cursor,
                row.cursor_ledger,
                row.state.mark_delete,
            )
        return store

    def _report_damage(self, cursor: str, row: StoredCursor, store: CursorStore) -> None:
        for place in store.damage:
            self._damage.add(place)
            log.warning("%s: cursor %s: cursor %s", self.name, cursor, place.describe())
        recovered = store.recovered.mark_delete if store.recovered is not None else row.state.mark_delete
        log.warning(
            "%s: cursor %s: its cursor ledger %d was damaged; the cursor goes on from the newest"
            " flush that reads back intact (mark-delete %s; each flush writes its marker twice, so"
            " one cut copy costs nothing): acks made after that flush, if any, are lost and those"
            " messages will be delivered again",
            self.name,
            cursor,
            row.cursor_ledger,
            recovered,
        )

    def _committer(self, cursor: str) -> Callable[[int, Position], None]:
        def commit(cursor_ledger: int, mark_delete: Position) -> None:
            self._metadata.put_cursor(self._ml_id, cursor, mark_delete, cursor_ledger)

        return commit
