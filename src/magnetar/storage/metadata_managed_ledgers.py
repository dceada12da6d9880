"""The ``managed_ledgers`` table: each managed ledger's id, name and directory."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass

from magnetar.storage.group_commit import GroupCommit
from magnetar.storage.ledger_info import LedgerInfo
from magnetar.storage.metadata_ledgers import closed_at, queue_garbage, raise_counter
from magnetar.storage.position import Position


@dataclass(frozen=True, slots=True)
class ManagedLedgerRecord:
    ml_id: int
    name: str
    directory: str


#: Tables whose rows hang off a managed ledger (by ``ml_id``): forgotten with it.
_OWNED_TABLES = ("ledgers", "cursors", "properties", "places", "place_pages")


class ManagedLedgerTable:
    """The metadata store's managed-ledger rows (a part of ``MetadataStore``)."""

    _commits: GroupCommit

    def managed_ledger(self, name: str) -> ManagedLedgerRecord | None:
        sql = "SELECT id, name, directory FROM managed_ledgers WHERE name = ?"
        rows = self._commits.query(sql, (name,))
        return ManagedLedgerRecord(*rows[0]) if rows else None

    def create_managed_ledger(self, name: str, directory: str) -> ManagedLedgerRecord:
        def write(db: sqlite3.Connection) -> ManagedLedgerRecord:
            cur = db.execute(
                "INSERT INTO managed_ledgers (name, directory, created_at) VALUES (?, ?, ?)",
                (name, directory, time.time()),
            )
            return ManagedLedgerRecord(int(cur.lastrowid or 0), name, directory)

        return self._commits.grouped(write)

    def managed_ledger_by_directory(self, directory: str) -> ManagedLedgerRecord | None:
        sql = "SELECT id, name, directory FROM managed_ledgers WHERE directory = ?"
        rows = self._commits.query(sql, (directory,))
        return ManagedLedgerRecord(*rows[0]) if rows else None

    def managed_ledger_names(self, prefix: str = "") -> list[str]:
        """The names starting with ``prefix``, sorted: a range of the unique index on ``name``, so a
        namespace's topics are found without reading every other namespace's."""
        if not prefix:
            return [row[0] for row in self._commits.query("SELECT name FROM managed_ledgers ORDER BY name")]
        sql = "SELECT name FROM managed_ledgers WHERE name >= ? AND name < ? ORDER BY name"
        return [row[0] for row in self._commits.query(sql, (prefix, _after_prefix(prefix)))]

    def count_managed_ledgers(self, prefix: str) -> int:
        """How many names start with ``prefix`` (a range of the index, as ``managed_ledger_names``)."""
        if not prefix:
            return int(self._commits.query("SELECT COUNT(*) FROM managed_ledgers")[0][0])
        sql = "SELECT COUNT(*) FROM managed_ledgers WHERE name >= ? AND name < ?"
        return int(self._commits.query(sql, (prefix, _after_prefix(prefix)))[0][0])

    def knows_managed_ledgers(self) -> bool:
        """Whether any managed ledger is stored (one row read, not a count of 100,000)."""
        return bool(self._commits.query("SELECT 1 FROM managed_ledgers LIMIT 1"))

    def managed_ledger_directories(self) -> set[str]:
        """Every managed ledger's directory (read apart: start-up's check runs on a thread)."""
        return {row[0] for row in self._commits.query_apart("SELECT directory FROM managed_ledgers")}

    def delete_managed_ledger(self, ml_id: int) -> None:
        """Forget a managed ledger and everything that hangs off it, in one commit; its ledgers'
        objects in the object store (tiered storage) are queued for deletion in the same commit."""
        with self._commits.transaction() as db:
            keys = db.execute(
                "SELECT offload_key FROM ledgers WHERE ml_id = ? AND offload_key IS NOT NULL", (ml_id,)
            ).fetchall()
            queue_garbage(db, [key for (key,) in keys])
            for table in _OWNED_TABLES:
                db.execute(f"DELETE FROM {table} WHERE ml_id = ?", (ml_id,))
            db.execute("DELETE FROM managed_ledgers WHERE id = ?", (ml_id,))

    def import_managed_ledger(
        self,
        name: str,
        directory: str,
        ledgers: list[LedgerInfo],
        cursors: dict[str, tuple[Position, int]],
        garbage: Iterable[str] = (),
    ) -> ManagedLedgerRecord:
        """Record a managed ledger found on disk and in the object store (``magnetar repair``), in
        one commit.

        ``ledgers`` keep their ids and where they live (an offloaded one its object); ``cursors``
        map a name to (mark-delete, cursor ledger id); ``garbage``: objects to delete (copies of
        ledgers recorded with another). The ledger-id counter is raised past every id given, so
        no id is handed out twice.
        """
        with self._commits.transaction() as db:
            cur = db.execute(
                "INSERT INTO managed_ledgers (name, directory, created_at) VALUES (?, ?, ?)",
                (name, directory, time.time()),
            )
            ml_id = int(cur.lastrowid or 0)
            db.executemany(
                "INSERT INTO ledgers (ledger_id, ml_id, entries, size_bytes, created_at, closed_at,"
                " offload_key, offload_state, offload_size, offload_checksum, offloaded_at, local_deleted)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        i.ledger_id,
                        ml_id,
                        i.entries,
                        i.size_bytes,
                        i.created_at,
                        closed_at(i),
                        *_offload_columns(i),
                    )
                    for i in ledgers
                ],
            )
            queue_garbage(db, garbage)
            for cursor_name, (mark_delete, cursor_ledger) in cursors.items():
                db.execute(
                    "INSERT INTO cursors (ml_id, name, md_ledger, md_entry, individually_deleted,"
                    " batch_acks, cursor_ledger) VALUES (?, ?, ?, ?, '[]', '[]', ?)",
                    (ml_id, cursor_name, mark_delete.ledger_id, mark_delete.entry_id, cursor_ledger),
                )
            ids = [i.ledger_id for i in ledgers] + [c for _, c in cursors.values()]
            if ids:
                raise_counter(db, max(ids))
            return ManagedLedgerRecord(ml_id, name, directory)


def _offload_columns(info: LedgerInfo) -> tuple[object, ...]:
    offload = info.offload
    if offload is None:
        return (None, None, 0, 0, None, 0)
    return (
        offload.key,
        offload.state,
        offload.object_size,
        offload.checksum,
        offload.offloaded_at,
        int(offload.local_deleted),
    )


def _after_prefix(prefix: str) -> str:
    """The least string above every string starting with ``prefix`` (its last character raised)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)
