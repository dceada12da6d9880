"""The two small key/value tables: ``properties`` (per managed ledger) and ``kv`` (the broker's)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from magnetar.storage.group_commit import GroupCommit


class PropertyTable:
    """A managed ledger's properties (a part of ``MetadataStore``)."""

    _commits: GroupCommit

    def get_property(self, ml_id: int, key: str) -> str | None:
        sql = "SELECT value FROM properties WHERE ml_id = ? AND key = ?"
        rows = self._commits.query(sql, (ml_id, key))
        value: str | None = rows[0][0] if rows else None
        return value

    def set_property(self, ml_id: int, key: str, value: str) -> None:
        self._commits.grouped(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO properties (ml_id, key, value) VALUES (?, ?, ?)", (ml_id, key, value)
            )
        )

    def delete_property(self, ml_id: int, key: str) -> None:
        with self._commits.transaction() as db:
            db.execute("DELETE FROM properties WHERE ml_id = ? AND key = ?", (ml_id, key))

    def properties(self, ml_id: int) -> dict[str, str]:
        rows = self._commits.query("SELECT key, value FROM properties WHERE ml_id = ?", (ml_id,))
        return {key: value for key, value in rows}


class BrokerValueTable:
    """Small durable values for the broker itself, not tied to a managed ledger (a part of
    ``MetadataStore``)."""

    _commits: GroupCommit

    def get(self, key: str) -> str | None:
        rows = self._commits.query("SELECT value FROM kv WHERE key = ?", (key,))
        value: str | None = rows[0][0] if rows else None
        return value

    def put(self, key: str, value: str) -> None:
        with self._commits.transaction() as db:
            db.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))

    def put_new(self, key: str, value: str) -> bool:
        """Store ``value`` unless ``key`` exists (another process may have written it first):
        whether it was stored. Versions numbered by several writers are allocated this way."""
        with self._commits.transaction() as db:
            added = db.execute("INSERT OR IGNORE INTO kv (key, value) VALUES (?, ?)", (key, value))
            return added.rowcount == 1

    def delete(self, key: str) -> None:
        with self._commits.transaction() as db:
            db.execute("DELETE FROM kv WHERE key = ?", (key,))

    def put_grouped(self, key: str, value: str) -> None:
        """``put`` in a transaction shared with the writes other threads commit at the same time
        (group commit): durable when it returns, one fsync for many writers."""
        self._commits.grouped(
            lambda db: db.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))
        )

    def delete_grouped(self, key: str) -> None:
        """``delete``, group-committed as ``put_grouped``."""
        self._commits.grouped(lambda db: db.execute("DELETE FROM kv WHERE key = ?", (key,)))

    def write_grouped(self, changes: Mapping[str, str | None]) -> None:
        """Put each key's value (None: delete it), all in one group-committed transaction: what
        changed of many records since the last write (the MQTT sessions, retained messages)."""

        def write(db: sqlite3.Connection) -> None:
            for key, value in changes.items():
                if value is None:
                    db.execute("DELETE FROM kv WHERE key = ?", (key,))
                else:
                    db.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))

        self._commits.grouped(write)

    def items(self, prefix: str) -> list[tuple[str, str]]:
        """The keys starting with ``prefix`` and their values, in key order."""
        sql = "SELECT key, value FROM kv WHERE substr(key, 1, ?) = ? ORDER BY key"
        return [(row[0], row[1]) for row in self._commits.query(sql, (len(prefix), prefix))]

    def keys(self, prefix: str = "") -> list[str]:
        sql = "SELECT key FROM kv WHERE substr(key, 1, ?) = ? ORDER BY key"
        return [row[0] for row in self._commits.query(sql, (len(prefix), prefix))]
