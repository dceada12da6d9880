"""The ``ledgers`` table and the ledger-id counter: which ledgers each managed ledger has, and
where each lives (local files, a copy in the object store, or only that copy: tiered storage);
``offload_garbage``: objects no ledger owns any more, to delete from the object store.

Ledger ids come from one counter for the whole store, so they never repeat, even across
managed ledgers or after deletes (cursor ledgers take theirs from it too).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable

from magnetar.storage.group_commit import GroupCommit
from magnetar.storage.ledger_info import OFFLOADED, OFFLOADING, LedgerInfo, Offload

_COLUMNS = (
    "ledger_id, entries, size_bytes, created_at, closed_at,"
    " offload_key, offload_state, offload_size, offload_checksum, offloaded_at, local_deleted"
)


class LedgerTable:
    """The metadata store's ledger rows (a part of ``MetadataStore``)."""

    _commits: GroupCommit

    def ledgers(self, ml_id: int) -> list[LedgerInfo]:
        rows = self._commits.query(
            f"SELECT {_COLUMNS} FROM ledgers WHERE ml_id = ? ORDER BY ledger_id", (ml_id,)
        )
        return [_info(row) for row in rows]

    def ledger(self, ledger_id: int) -> LedgerInfo | None:
        rows = self._commits.query(f"SELECT {_COLUMNS} FROM ledgers WHERE ledger_id = ?", (ledger_id,))
        return _info(rows[0]) if rows else None

    def create_ledger(self, ml_id: int, created_at: float, close: LedgerInfo | None = None) -> int:
        """Allocate the next ledger id and commit its row; also close ``close`` in the same commit.

        Doing both at once means a crash never leaves a managed ledger with two
        open ledgers, or with its last ledger closed and no successor.
        """

        def write(db: sqlite3.Connection) -> int:
            if close is not None:
                write_ledger(db, close)
            ledger_id = next_ledger_id(db)
            db.execute(
                "INSERT INTO ledgers (ledger_id, ml_id, entries, size_bytes, created_at, closed_at)"
                " VALUES (?, ?, 0, 0, ?, NULL)",
                (ledger_id, ml_id, created_at),
            )
            return ledger_id

        return self._commits.grouped(write)

    def allocate_ledger_id(self) -> int:
        """A new ledger id with no ledger row (cursor ledgers take theirs from the same counter)."""
        return self._commits.grouped(next_ledger_id)

    def last_ledger_id(self) -> int:
        """The highest ledger id handed out so far (-1: none): ids above it were never this store's."""
        rows = self._commits.query("SELECT value FROM counters WHERE name = 'ledger_id'")
        last: int = rows[0][0] if rows else -1
        return last

    def raise_ledger_counter(self, at_least: int) -> None:
        """Make the next ledger id larger than ``at_least`` (ids found on disk are never reused)."""
        with self._commits.transaction() as db:
            raise_counter(db, at_least)

    def update_ledger(self, info: LedgerInfo) -> None:
        self._commits.grouped(lambda db: write_ledger(db, info))

    def delete_ledgers(self, ledger_ids: Iterable[int], garbage: Iterable[str] = ()) -> None:
        """Delete the rows and, in the same commit, queue their objects (``garbage``) for deletion."""
        with self._commits.transaction() as db:
            db.executemany("DELETE FROM ledgers WHERE ledger_id = ?", [(lid,) for lid in ledger_ids])
            queue_garbage(db, garbage)

    # -- tiered storage: where a ledger lives ------------------------------------------------------
    def begin_offload(self, ledger_id: int, key: str) -> bool:
        """Record that ``key`` is being written for a closed, local-only ledger (before a byte is
        sent, so a crash leaves a key to clean up); False if the ledger is gone, open or offloaded."""

        def write(db: sqlite3.Connection) -> bool:
            cur = db.execute(
                "UPDATE ledgers SET offload_key = ?, offload_state = ?, offload_size = 0,"
                " offload_checksum = 0, offloaded_at = NULL, local_deleted = 0"
                " WHERE ledger_id = ? AND offload_key IS NULL AND closed_at IS NOT NULL",
                (key, OFFLOADING, ledger_id),
            )
            return cur.rowcount == 1

        return self._commits.grouped(write)

    def complete_offload(self, ledger_id: int, key: str, object_size: int, checksum: int, at: float) -> bool:
        """The object ``key`` is complete and verified; False if the ledger no longer waits for it
        (deleted meanwhile, or its attempt given up): then nothing owns the object."""

        def write(db: sqlite3.Connection) -> bool:
            cur = db.execute(
                "UPDATE ledgers SET offload_state = ?, offload_size = ?, offload_checksum = ?,"
                " offloaded_at = ? WHERE ledger_id = ? AND offload_key = ? AND offload_state = ?",
                (OFFLOADED, object_size, checksum, at, ledger_id, key, OFFLOADING),
            )
            return cur.rowcount == 1

        return self._commits.grouped(write)

    def abort_offload(self, ledger_id: int, key: str) -> None:
        """Give up an attempt that did not complete: the ledger is local only again, and whatever
        reached ``key`` is queued for deletion, in one commit."""

        def write(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE ledgers SET offload_key = NULL, offload_state = NULL, offload_size = 0,"
                " offload_checksum = 0, offloaded_at = NULL, local_deleted = 0"
                " WHERE ledger_id = ? AND offload_key = ? AND offload_state = ?",
                (ledger_id, key, OFFLOADING),
            )
            queue_garbage(db, [key])

        self._commits.grouped(write)

    def mark_local_deleted(self, ledger_ids: Iterable[int]) -> None:
        """The ledgers' local files are to go: from now on only their (verified) objects are read."""
        with self._commits.transaction() as db:
            db.executemany(
                "UPDATE ledgers SET local_deleted = 1 WHERE ledger_id = ? AND offload_state = ?",
                [(lid, OFFLOADED) for lid in ledger_ids],
            )

    def offload_garbage(self, limit: int = 100) -> list[str]:
        """Objects to delete from the object store, oldest first."""
        rows = self._commits.query("SELECT key FROM offload_garbage ORDER BY queued_at LIMIT ?", (limit,))
        return [key for (key,) in rows]

    def forget_offload_garbage(self, keys: Iterable[str]) -> None:
        """The objects ``keys`` are deleted (or were never there)."""
        with self._commits.transaction() as db:
            db.executemany("DELETE FROM offload_garbage WHERE key = ?", [(key,) for key in keys])


def queue_garbage(db: sqlite3.Connection, keys: Iterable[str]) -> None:
    """Queue objects for deletion from the object store (in the caller's transaction)."""
    now = time.time()
    db.executemany(
        "INSERT OR IGNORE INTO offload_garbage (key, queued_at) VALUES (?, ?)", [(key, now) for key in keys]
    )


def _info(row: tuple[object, ...]) -> LedgerInfo:
    lid, n, size, created, closed, key, state, obj_size, checksum, offloaded_at, local_deleted = row
    offload = None
    if isinstance(key, str):
        offload = Offload(
            key, str(state), _int(obj_size), _int(checksum), _float(offloaded_at), bool(local_deleted)
        )
    return LedgerInfo(
        _int(lid),
        _int(n),
        _int(size),
        float(_float(created) or 0.0),
        closed is not None,
        _float(closed),
        offload,
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def next_ledger_id(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT value FROM counters WHERE name = 'ledger_id'").fetchone()
    ledger_id: int = 0 if row is None else row[0] + 1
    db.execute("INSERT OR REPLACE INTO counters (name, value) VALUES ('ledger_id', ?)", (ledger_id,))
    return ledger_id


def raise_counter(db: sqlite3.Connection, at_least: int) -> None:
    row = db.execute("SELECT value FROM counters WHERE name = 'ledger_id'").fetchone()
    if row is None or row[0] < at_least:
        db.execute("INSERT OR REPLACE INTO counters (name, value) VALUES ('ledger_id', ?)", (at_least,))


def write_ledger(db: sqlite3.Connection, info: LedgerInfo) -> None:
    db.execute(
        "UPDATE ledgers SET entries = ?, size_bytes = ?, closed_at = ? WHERE ledger_id = ?",
        (info.entries, info.size_bytes, closed_at(info), info.ledger_id),
    )


def closed_at(info: LedgerInfo) -> float | None:
    return info.closed_at if info.closed else None
