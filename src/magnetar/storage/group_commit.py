"""The metadata store's SQLite connection, and the group commit its frequent writes share.

WAL mode with ``synchronous=FULL``: every commit is on disk when it returns, which the data
path relies on (a ledger's row is committed before its first entry is written, so an fsynced
entry is never in a ledger nobody knows of). Writes that threads are waiting to commit at the
same time share one transaction and one fsync, each still returning only once it is committed.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Generic, TypeVar

from magnetar.storage.disk_space import is_out_of_space
from magnetar.storage.errors import StorageClosedError, StorageFullError

T = TypeVar("T")
#: How long a transaction waits for another process's (a broker worker's) to end before it fails
#: with "database is locked". Each holds the write lock for one commit and its fsync (milliseconds);
#: Python's 5 s default would fail a topic's open behind a disk that stalls for seconds.
BUSY_TIMEOUT_S = 30.0
#: A row as SQLite hands it back: its columns' types are the schema's, unknown to Python.
Row = tuple[Any, ...]


class _Write(Generic[T]):
    """One write waiting for a group commit, and its outcome."""

    __slots__ = ("done", "error", "result", "write")
    #: Set once ``write`` returned; unset (not None) before: ``outcome`` reads it only when no
    #: error came, which means ``write`` ran to its end.
    result: T

    def __init__(self, write: Callable[[sqlite3.Connection], T]) -> None:
        self.write = write
        self.done = False
        self.error: BaseException | None = None

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.result


class GroupCommit:
    """One SQLite connection shared by every thread of a Storage, guarded by a lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._queue: list[_Write[Any]] = []  # writes waiting for a group commit (grouped)
        self._queue_lock = threading.Lock()
        self._db: sqlite3.Connection | None = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction of its own. A full disk (SQLITE_FULL, at any statement or at COMMIT)
        rolls it back and raises StorageFullError: the store stays usable and the write can be
        tried again."""
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

    def grouped(self, write: Callable[[sqlite3.Connection], T]) -> T:
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

    def _classified(self, exc: BaseException) -> BaseException:
        """SQLite's "database or disk is full" as StorageFullError; any other error as it is."""
        if isinstance(exc, sqlite3.Error) and is_out_of_space(exc):
            return StorageFullError(f"metadata store {self.path}: {exc}")
        return exc

    def query(self, sql: str, args: tuple[object, ...] = ()) -> list[Row]:
        with self._lock:
            if self._db is None:
                raise StorageClosedError("metadata store is closed")
            rows: list[Row] = self._db.execute(sql, args).fetchall()
            return rows

    def query_apart(self, sql: str, args: tuple[object, ...] = ()) -> list[Row]:
        """``query`` on a connection of its own, opened for it: a long read (100,000 rows, on a
        thread) that the shared connection's other users must not queue behind (WAL: readers
        never wait for each other or for the writer)."""
        with self._lock:
            if self._db is None:
                raise StorageClosedError("metadata store is closed")
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        try:
            rows: list[Row] = db.execute(sql, args).fetchall()
            return rows
        finally:
            db.close()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
