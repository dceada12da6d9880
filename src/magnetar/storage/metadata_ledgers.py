"""The ``ledgers`` table and the ledger-id counter: which ledgers each managed ledger has.

Ledger ids come from one counter for the whole store, so they never repeat, even across
managed ledgers or after deletes (cursor ledgers take theirs from it too).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from magnetar.storage.group_commit import GroupCommit
from magnetar.storage.ledger_info import LedgerInfo


class LedgerTable:
    """The metadata store's ledger rows (a part of ``MetadataStore``)."""

    _commits: GroupCommit

    def ledgers(self, ml_id: int) -> list[LedgerInfo]:
        rows = self._commits.query(
            "SELECT ledger_id, entries, size_bytes, created_at, closed_at FROM ledgers"
            " WHERE ml_id = ? ORDER BY ledger_id",
            (ml_id,),
        )
        return [
            LedgerInfo(lid, n, size, created, closed is not None, closed)
            for lid, n, size, created, closed in rows
        ]

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

    def delete_ledgers(self, ledger_ids: Iterable[int]) -> None:
        with self._commits.transaction() as db:
            db.executemany("DELETE FROM ledgers WHERE ledger_id = ?", [(lid,) for lid in ledger_ids])


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
