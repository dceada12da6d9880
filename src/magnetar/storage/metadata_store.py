"""Durable metadata in SQLite: managed ledgers, their ledgers, cursors and properties.

WAL mode with ``synchronous=FULL``: every commit is on disk when it returns,
which the data path relies on (a ledger's row is committed before its first
entry is written, so an fsynced entry is never in a ledger nobody knows of).
The frequent writes (new managed ledgers, ledgers, ledger ids, cursors, properties)
are group-committed: writes that threads are waiting to commit at the same time share
one transaction and one fsync, each still returning only once it is committed.
Ledger ids come from one counter for the whole store, so they never repeat,
even across managed ledgers or after deletes.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.storage.cursor_state import CursorState
from magnetar.storage.disk_space import is_out_of_space
from magnetar.storage.errors import StorageClosedError, StorageFullError
from magnetar.storage.ledger_info import LedgerInfo
from magnetar.storage.position import Position

#: One cursor's place changes: (cursor, cleared, [(name, encoded place)], [names to delete]).
PlaceChanges = tuple[str, bool, list[tuple[int, bytes]], list[int]]

SCHEMA_VERSION = 2  # 2: cursors.cursor_ledger (PIP 81 cursor ledgers)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS managed_ledgers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    directory TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS ledgers (
    ledger_id INTEGER PRIMARY KEY,
    ml_id INTEGER NOT NULL,
    entries INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL,
    created_at REAL NOT NULL,
    closed_at REAL
);
CREATE INDEX IF NOT EXISTS ledgers_by_managed_ledger ON ledgers (ml_id, ledger_id);
CREATE TABLE IF NOT EXISTS cursors (
    ml_id INTEGER NOT NULL,
    name TEXT NOT NULL,
    md_ledger INTEGER NOT NULL,
    md_entry INTEGER NOT NULL,
    individually_deleted TEXT NOT NULL,
    batch_acks TEXT NOT NULL,
    cursor_ledger INTEGER,
    PRIMARY KEY (ml_id, name)
);
CREATE TABLE IF NOT EXISTS properties (
    ml_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (ml_id, key)
);
CREATE TABLE IF NOT EXISTS places (
    ml_id INTEGER NOT NULL,
    cursor TEXT NOT NULL,
    name TEXT NOT NULL,
    state BLOB NOT NULL,
    PRIMARY KEY (ml_id, cursor, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS place_pages (
    ml_id INTEGER NOT NULL,
    cursor TEXT NOT NULL,
    page INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (ml_id, cursor, page)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class StoredCursor:
    """A cursor's row: its cursor ledger, or (``cursor_ledger`` None) its state in the earlier JSON form.

    For a cursor with a cursor ledger, ``state`` holds only the mark-delete
    position as of the last switch of cursor ledger; the cursor ledger's marker
    is what counts.
    """

    state: CursorState
    cursor_ledger: int | None


class _Write:
    """One write waiting for a group commit, and its outcome."""

    __slots__ = ("done", "error", "result", "write")

    def __init__(self, write: Callable[[sqlite3.Connection], Any]) -> None:
        self.write = write
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


@dataclass(frozen=True, slots=True)
class ManagedLedgerRecord:
    ml_id: int
    name: str
    directory: str


class MetadataStore:
    """One SQLite connection shared by every thread of a Storage, guarded by a lock."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._queue: list[_Write] = []  # writes waiting for a group commit (_grouped)
        self._queue_lock = threading.Lock()
        #: Transactions that wrote places (``write_places``), for tests and stats.
        self.place_writes = 0
        self._db: sqlite3.Connection | None = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        with self._tx() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path} has schema {version}, newer than this code's {SCHEMA_VERSION}"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            columns = {row[1] for row in db.execute("PRAGMA table_info(cursors)")}
            if "cursor_ledger" not in columns:  # schema 1: every cursor is one JSON row
                db.execute("ALTER TABLE cursors ADD COLUMN cursor_ledger INTEGER")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction. A full disk (SQLITE_FULL, at any statement or at COMMIT) rolls it back
        and raises StorageFullError: the store stays usable and the write can be tried again."""
        with self._lock:
            if self._db is None:
                raise StorageClosedError("metadata store is closed")
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:  # SQLite may have rolled back by itself already
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise self._classified(exc) from exc

    def _classified(self, exc: BaseException) -> BaseException:
        """SQLite's "database or disk is full" as StorageFullError; any other error as it is."""
        if isinstance(exc, sqlite3.Error) and is_out_of_space(exc):
            return StorageFullError(f"metadata store {self.path}: {exc}")
        return exc

    def _grouped(self, write: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``write(db)`` in a transaction shared with the writes other threads wait to commit.

        The first writer to get the lock commits everything queued by then (each write in a
        savepoint of its own, so one that fails costs only itself); the others find theirs
        done. Returns ``write``'s result once it is committed, or raises its error (or the
        commit's).
        """
        request = _Write(write)
        with self._queue_lock:
            self._queue.append(request)
        with self._lock:
            if not request.done:
                self._commit_queued()
        return request.outcome()

    def _commit_queued(self) -> None:
        with self._queue_lock:
            batch, self._queue = self._queue, []
        db = self._db
        try:
            if db is None:
                raise StorageClosedError("metadata store is closed")
            db.execute("BEGIN IMMEDIATE")
            for request in batch:
                db.execute("SAVEPOINT one_write")
                try:
                    request.result = request.write(db)
                except Exception as exc:
                    db.execute("ROLLBACK TO one_write")
                    request.error = self._classified(exc)
                db.execute("RELEASE one_write")
            db.execute("COMMIT")
        except BaseException as exc:
            if db is not None and db.in_transaction:
                with suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            for request in batch:
                request.error = request.error or self._classified(exc)
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt and the like: every request in the batch has it as its error
        finally:
            for request in batch:
                request.done = True

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            if self._db is None:
                raise StorageClosedError("metadata store is closed")
            return self._db.execute(sql, args).fetchall()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # --------------------------------------------------------- managed ledgers

    def managed_ledger(self, name: str) -> ManagedLedgerRecord | None:
        rows = self._query("SELECT id, name, directory FROM managed_ledgers WHERE name = ?", (name,))
        return ManagedLedgerRecord(*rows[0]) if rows else None

    def create_managed_ledger(self, name: str, directory: str) -> ManagedLedgerRecord:
        def write(db: sqlite3.Connection) -> ManagedLedgerRecord:
            cur = db.execute(
                "INSERT INTO managed_ledgers (name, directory, created_at) VALUES (?, ?, ?)",
                (name, directory, time.time()),
            )
            return ManagedLedgerRecord(int(cur.lastrowid or 0), name, directory)

        return self._grouped(write)

    def managed_ledger_by_directory(self, directory: str) -> ManagedLedgerRecord | None:
        sql = "SELECT id, name, directory FROM managed_ledgers WHERE directory = ?"
        rows = self._query(sql, (directory,))
        return ManagedLedgerRecord(*rows[0]) if rows else None

    def managed_ledger_names(self) -> list[str]:
        return [row[0] for row in self._query("SELECT name FROM managed_ledgers ORDER BY name")]

    def managed_ledger_directories(self) -> set[str]:
        return {row[0] for row in self._query("SELECT directory FROM managed_ledgers")}

    def delete_managed_ledger(self, ml_id: int) -> None:
        """Forget a managed ledger and everything that hangs off it, in one commit."""
        with self._tx() as db:
            for table in ("ledgers", "cursors", "properties", "places", "place_pages"):
                db.execute(f"DELETE FROM {table} WHERE ml_id = ?", (ml_id,))
            db.execute("DELETE FROM managed_ledgers WHERE id = ?", (ml_id,))

    # ----------------------------------------------------------------- ledgers

    def ledgers(self, ml_id: int) -> list[LedgerInfo]:
        rows = self._query(
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
                self._write_ledger(db, close)
            ledger_id = self._next_ledger_id(db)
            db.execute(
                "INSERT INTO ledgers (ledger_id, ml_id, entries, size_bytes, created_at, closed_at)"
                " VALUES (?, ?, 0, 0, ?, NULL)",
                (ledger_id, ml_id, created_at),
            )
            return ledger_id

        return self._grouped(write)

    def allocate_ledger_id(self) -> int:
        """A new ledger id with no ledger row (cursor ledgers take theirs from the same counter)."""
        return self._grouped(self._next_ledger_id)

    @staticmethod
    def _next_ledger_id(db: sqlite3.Connection) -> int:
        row = db.execute("SELECT value FROM counters WHERE name = 'ledger_id'").fetchone()
        ledger_id = 0 if row is None else row[0] + 1
        db.execute("INSERT OR REPLACE INTO counters (name, value) VALUES ('ledger_id', ?)", (ledger_id,))
        return ledger_id

    def last_ledger_id(self) -> int:
        """The highest ledger id handed out so far (-1: none): ids above it were never this store's."""
        rows = self._query("SELECT value FROM counters WHERE name = 'ledger_id'")
        return rows[0][0] if rows else -1

    def import_managed_ledger(
        self,
        name: str,
        directory: str,
        ledgers: list[LedgerInfo],
        cursors: dict[str, tuple[Position, int]],
    ) -> ManagedLedgerRecord:
        """Record a managed ledger found on disk (``magnetar repair``), in one commit.

        ``ledgers`` keep their ids; ``cursors`` map a name to (mark-delete, cursor ledger id). The
        ledger-id counter is raised past every id given, so no id is handed out twice.
        """
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO managed_ledgers (name, directory, created_at) VALUES (?, ?, ?)",
                (name, directory, time.time()),
            )
            ml_id = int(cur.lastrowid or 0)
            db.executemany(
                "INSERT INTO ledgers (ledger_id, ml_id, entries, size_bytes, created_at, closed_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(i.ledger_id, ml_id, i.entries, i.size_bytes, i.created_at, _closed_at(i)) for i in ledgers],
            )
            for cursor_name, (mark_delete, cursor_ledger) in cursors.items():
                db.execute(
                    "INSERT INTO cursors (ml_id, name, md_ledger, md_entry, individually_deleted,"
                    " batch_acks, cursor_ledger) VALUES (?, ?, ?, ?, '[]', '[]', ?)",
                    (ml_id, cursor_name, mark_delete.ledger_id, mark_delete.entry_id, cursor_ledger),
                )
            ids = [i.ledger_id for i in ledgers] + [c for _, c in cursors.values()]
            if ids:
                self._raise_counter(db, max(ids))
            return ManagedLedgerRecord(ml_id, name, directory)

    def raise_ledger_counter(self, at_least: int) -> None:
        """Make the next ledger id larger than ``at_least`` (ids found on disk are never reused)."""
        with self._tx() as db:
            self._raise_counter(db, at_least)

    @staticmethod
    def _raise_counter(db: sqlite3.Connection, at_least: int) -> None:
        row = db.execute("SELECT value FROM counters WHERE name = 'ledger_id'").fetchone()
        if row is None or row[0] < at_least:
            db.execute("INSERT OR REPLACE INTO counters (name, value) VALUES ('ledger_id', ?)", (at_least,))

    def update_ledger(self, info: LedgerInfo) -> None:
        self._grouped(lambda db: self._write_ledger(db, info))

    @staticmethod
    def _write_ledger(db: sqlite3.Connection, info: LedgerInfo) -> None:
        db.execute(
            "UPDATE ledgers SET entries = ?, size_bytes = ?, closed_at = ? WHERE ledger_id = ?",
            (info.entries, info.size_bytes, info.closed_at if info.closed else None, info.ledger_id),
        )

    def delete_ledgers(self, ledger_ids: Iterable[int]) -> None:
        with self._tx() as db:
            db.executemany("DELETE FROM ledgers WHERE ledger_id = ?", [(lid,) for lid in ledger_ids])

    # ----------------------------------------------------------------- cursors

    def cursors(self, ml_id: int) -> dict[str, StoredCursor]:
        rows = self._query(
            "SELECT name, md_ledger, md_entry, individually_deleted, batch_acks, cursor_ledger FROM cursors"
            " WHERE ml_id = ?",
            (ml_id,),
        )
        return {
            name: StoredCursor(CursorState.from_columns(lid, eid, ranges, batch), cursor_ledger)
            for name, lid, eid, ranges, batch, cursor_ledger in rows
        }

    def put_cursor(self, ml_id: int, name: str, mark_delete: Position, cursor_ledger: int) -> None:
        """Record (create or switch) the cursor ledger that holds a cursor's state."""
        self._grouped(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO cursors (ml_id, name, md_ledger, md_entry, individually_deleted,"
                " batch_acks, cursor_ledger) VALUES (?, ?, ?, ?, '[]', '[]', ?)",
                (ml_id, name, mark_delete.ledger_id, mark_delete.entry_id, cursor_ledger),
            )
        )

    def save_cursors(self, ml_id: int, states: Iterable[tuple[str, CursorState]]) -> None:
        """Store cursors in the earlier one-JSON-row form (what schema 1 wrote; for migration tests)."""
        rows = [
            (ml_id, name, s.mark_delete.ledger_id, s.mark_delete.entry_id, s.ranges_json(), s.batch_json())
            for name, s in states
        ]
        if not rows:
            return
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO cursors (ml_id, name, md_ledger, md_entry, individually_deleted,"
                " batch_acks) VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )

    def delete_cursor(self, ml_id: int, name: str) -> None:
        """Forget a cursor and its places (``places.py``) in one commit."""
        with self._tx() as db:
            db.execute("DELETE FROM cursors WHERE ml_id = ? AND name = ?", (ml_id, name))
            db.execute("DELETE FROM places WHERE ml_id = ? AND cursor = ?", (ml_id, name))
            db.execute("DELETE FROM place_pages WHERE ml_id = ? AND cursor = ?", (ml_id, name))

    # ------------------------------------------------------------------ places

    def places(self, ml_id: int, cursor: str) -> list[tuple[str, bytes]]:
        """A cursor's places stored one per row, as before pages: ``(name, encoded place)``
        (read once, to be rewritten as pages)."""
        return self._query("SELECT name, state FROM places WHERE ml_id = ? AND cursor = ?", (ml_id, cursor))

    def place_pages(self, ml_id: int, cursor: str) -> list[tuple[int, bytes]]:
        """The stored place pages of a cursor: ``(page, bytes)``."""
        return self._query(
            "SELECT page, data FROM place_pages WHERE ml_id = ? AND cursor = ?", (ml_id, cursor)
        )

    def write_places(self, ml_id: int, changes: Iterable[PlaceChanges]) -> None:
        """Apply the place changes of several cursors in one transaction (one commit, one fsync).

        Each change is ``(cursor, cleared, write, gone)``: with ``cleared`` the cursor's stored
        places are deleted first; ``write`` holds ``(page, bytes)``, ``gone`` pages to delete.
        """
        with self._tx() as db:
            for cursor, cleared, write, gone in changes:
                if cleared:
                    db.execute("DELETE FROM places WHERE ml_id = ? AND cursor = ?", (ml_id, cursor))
                    db.execute("DELETE FROM place_pages WHERE ml_id = ? AND cursor = ?", (ml_id, cursor))
                if gone:
                    db.executemany(
                        "DELETE FROM place_pages WHERE ml_id = ? AND cursor = ? AND page = ?",
                        [(ml_id, cursor, page) for page in gone],
                    )
                if write:
                    db.executemany(
                        "INSERT OR REPLACE INTO place_pages (ml_id, cursor, page, data) VALUES (?, ?, ?, ?)",
                        [(ml_id, cursor, page, data) for page, data in write],
                    )
        self.place_writes += 1

    # -------------------------------------------------------------- properties

    def get_property(self, ml_id: int, key: str) -> str | None:
        rows = self._query("SELECT value FROM properties WHERE ml_id = ? AND key = ?", (ml_id, key))
        return rows[0][0] if rows else None

    def set_property(self, ml_id: int, key: str, value: str) -> None:
        self._grouped(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO properties (ml_id, key, value) VALUES (?, ?, ?)", (ml_id, key, value)
            )
        )

    def delete_property(self, ml_id: int, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM properties WHERE ml_id = ? AND key = ?", (ml_id, key))

    def properties(self, ml_id: int) -> dict[str, str]:
        return dict(self._query("SELECT key, value FROM properties WHERE ml_id = ?", (ml_id,)))

    # ------------------------------------------------- broker-wide key/values

    def get(self, key: str) -> str | None:
        """A small durable value for the broker itself (not tied to a managed ledger)."""
        rows = self._query("SELECT value FROM kv WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def put(self, key: str, value: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))

    def delete(self, key: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM kv WHERE key = ?", (key,))

    def keys(self, prefix: str = "") -> list[str]:
        rows = self._query(
            "SELECT key FROM kv WHERE substr(key, 1, ?) = ? ORDER BY key", (len(prefix), prefix)
        )
        return [row[0] for row in rows]


def _closed_at(info: LedgerInfo) -> float | None:
    return info.closed_at if info.closed else None
