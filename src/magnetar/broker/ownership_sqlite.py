"""``OwnershipStore`` for the workers of one machine: a SQLite file in WAL mode in the data directory.

Why SQLite rather than a table the supervisor holds: every worker reads and writes it by itself
(no request to a supervisor on the LOOKUP path, nothing lost when the supervisor restarts), its
transactions give the compare-and-set a bundle's first owner needs (``BEGIN IMMEDIATE``: one writer
at a time across processes), and its rows map one to one onto what ZooKeeper or etcd would hold
(a broker's ephemeral registration as a lease, a bundle's owner as a row naming it). A file of its
own (``ownership.sqlite``), not the storage's metadata store: ownership is a session's state, not
data (a whole-machine crash makes every lease stale anyway), so its commits skip the fsync
(``synchronous=NORMAL``) and never wait behind the storage's group commits.

Leases are on the wall clock (shared by every process, and by machines kept in time). The
supervisor also ends the session of a worker it saw die, so its bundles are taken at once.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from magnetar.broker.ownership import SPREAD_CHANGE, BrokerInfo

OWNERSHIP_FILE = "ownership.sqlite"
#: How long a session lives without a renewal (the workers renew a third of it).
DEFAULT_LEASE_SECONDS = 10.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS brokers (
    broker_id TEXT PRIMARY KEY,
    info TEXT NOT NULL,
    lease_until REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS bundle_owners (
    bundle TEXT PRIMARY KEY,
    broker_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS bundle_owners_by_broker ON bundle_owners (broker_id);
CREATE TABLE IF NOT EXISTS loaded_topics (
    topic TEXT PRIMARY KEY,
    broker_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS loaded_topics_by_broker ON loaded_topics (broker_id);
CREATE TABLE IF NOT EXISTS changes (
    version INTEGER PRIMARY KEY AUTOINCREMENT,
    path TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS spread_topics (
    topic TEXT PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS spread_idle_links (
    topic TEXT NOT NULL,
    subscription TEXT NOT NULL,
    broker_id TEXT NOT NULL,
    PRIMARY KEY (topic, subscription, broker_id)
);
CREATE INDEX IF NOT EXISTS spread_idle_links_by_broker ON spread_idle_links (broker_id);
CREATE TABLE IF NOT EXISTS spread_pinned_lookups (
    topic TEXT NOT NULL,
    host TEXT NOT NULL,
    pending INTEGER NOT NULL,
    until REAL NOT NULL,
    PRIMARY KEY (topic, host)
);
CREATE TABLE IF NOT EXISTS spread_resets (
    topic TEXT NOT NULL,
    subscription TEXT NOT NULL,
    resets INTEGER NOT NULL,
    PRIMARY KEY (topic, subscription)
);
"""


class SqliteOwnership:
    """Sessions, owners and change notices in ``<data_dir>/ownership.sqlite``; one per process,
    safe from any of its threads."""

    def __init__(
        self,
        path: Path,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.lease_seconds = lease_seconds
        self._clock = clock
        self._lock = threading.Lock()
        # 10 s: writes are a few rows, so another process holds the write lock for microseconds.
        self._db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        with self._write() as db:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                db.execute(statement)

    @classmethod
    def in_data_dir(cls, data_dir: Path, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> SqliteOwnership:
        return cls(Path(data_dir) / OWNERSHIP_FILE, lease_seconds)

    @staticmethod
    def reset(data_dir: Path) -> None:
        """Forget every session and owner (the supervisor, before its workers start): what a
        previous run left is stale, and no worker may find its bundles owned by the dead."""
        store = SqliteOwnership.in_data_dir(data_dir)
        try:
            with store._write() as db:
                db.execute("DELETE FROM bundle_owners")
                db.execute("DELETE FROM loaded_topics")
                db.execute("DELETE FROM brokers")
                db.execute("DELETE FROM spread_topics")
                db.execute("DELETE FROM spread_resets")
                db.execute("DELETE FROM spread_idle_links")
                db.execute("DELETE FROM spread_pinned_lookups")
        finally:
            store.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # -- sessions -----------------------------------------------------------------------------------
    def register(self, broker: BrokerInfo) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO brokers (broker_id, info, lease_until) VALUES (?, ?, ?)",
                (broker.broker_id, json.dumps(broker.to_json()), self._clock() + self.lease_seconds),
            )

    def renew(self, broker_id: str) -> bool:
        now = self._clock()
        with self._write() as db:
            cursor = db.execute(
                "UPDATE brokers SET lease_until = ? WHERE broker_id = ? AND lease_until > ?",
                (now + self.lease_seconds, broker_id, now),
            )
            return cursor.rowcount == 1

    def unregister(self, broker_id: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM bundle_owners WHERE broker_id = ?", (broker_id,))
            db.execute("DELETE FROM loaded_topics WHERE broker_id = ?", (broker_id,))
            db.execute("DELETE FROM spread_idle_links WHERE broker_id = ?", (broker_id,))
            db.execute("DELETE FROM brokers WHERE broker_id = ?", (broker_id,))

    def brokers(self) -> list[BrokerInfo]:
        rows = self._query(
            "SELECT info FROM brokers WHERE lease_until > ? ORDER BY broker_id", (self._clock(),)
        )
        return [BrokerInfo.from_json(json.loads(str(row[0]))) for row in rows]

    # -- owners -------------------------------------------------------------------------------------
    def owner(self, bundle: str) -> BrokerInfo | None:
        rows = self._query(
            "SELECT b.info FROM bundle_owners o JOIN brokers b ON b.broker_id = o.broker_id"
            " WHERE o.bundle = ? AND b.lease_until > ?",
            (bundle, self._clock()),
        )
        return BrokerInfo.from_json(json.loads(str(rows[0][0]))) if rows else None

    def assign(self, bundle: str, candidate: str) -> BrokerInfo:
        now = self._clock()
        with self._write() as db:
            row = db.execute(
                "SELECT b.info FROM bundle_owners o JOIN brokers b ON b.broker_id = o.broker_id"
                " WHERE o.bundle = ? AND b.lease_until > ?",
                (bundle, now),
            ).fetchone()
            if row is not None:
                return BrokerInfo.from_json(json.loads(row[0]))
            chosen = db.execute(
                "SELECT info FROM brokers WHERE broker_id = ? AND lease_until > ?", (candidate, now)
            ).fetchone()
            if chosen is None:
                raise LookupError(f"broker {candidate} has no live session")
            db.execute(
                "INSERT OR REPLACE INTO bundle_owners (bundle, broker_id) VALUES (?, ?)", (bundle, candidate)
            )
            return BrokerInfo.from_json(json.loads(chosen[0]))

    def release(self, bundle: str, broker_id: str) -> bool:
        with self._write() as db:
            cursor = db.execute(
                "DELETE FROM bundle_owners WHERE bundle = ? AND broker_id = ?", (bundle, broker_id)
            )
            return cursor.rowcount == 1

    def release_all(self, prefix: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM bundle_owners WHERE substr(bundle, 1, ?) = ?", (len(prefix), prefix))

    def owned(self, broker_id: str) -> list[str]:
        rows = self._query(
            "SELECT bundle FROM bundle_owners WHERE broker_id = ? ORDER BY bundle", (broker_id,)
        )
        return [str(row[0]) for row in rows]

    def bundle_counts(self) -> dict[str, int]:
        rows = self._query(
            "SELECT b.broker_id, count(o.bundle) FROM brokers b"
            " LEFT JOIN bundle_owners o ON o.broker_id = b.broker_id"
            " WHERE b.lease_until > ? GROUP BY b.broker_id",
            (self._clock(),),
        )
        return {str(broker): int(str(count)) for broker, count in rows}

    # -- spread topics ----------------------------------------------------------------------------
    def mark_spread(self, topic: str) -> bool:
        with self._write() as db:
            added = db.execute("INSERT OR IGNORE INTO spread_topics (topic) VALUES (?)", (topic,)).rowcount
            if added:
                self._changed(db, SPREAD_CHANGE)
        return bool(added)

    def spread_topics(self) -> set[str]:
        return {str(topic) for (topic,) in self._query("SELECT topic FROM spread_topics")}

    def note_reset(self, topic: str, subscription: str) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO spread_resets (topic, subscription, resets) VALUES (?, ?, 1)"
                " ON CONFLICT (topic, subscription) DO UPDATE SET resets = resets + 1",
                (topic, subscription),
            )

    def resets(self, topic: str, subscription: str) -> int:
        rows = self._query(
            "SELECT resets FROM spread_resets WHERE topic = ? AND subscription = ?", (topic, subscription)
        )
        return int(str(rows[0][0])) if rows else 0

    def note_link_idle(self, topic: str, subscription: str, broker_id: str, idle: bool) -> None:
        with self._write() as db:
            if idle:
                sql = "INSERT OR IGNORE INTO spread_idle_links (topic, subscription, broker_id)"
                sql += " VALUES (?, ?, ?)"
            else:
                sql = "DELETE FROM spread_idle_links"
                sql += " WHERE topic = ? AND subscription = ? AND broker_id = ?"
            db.execute(sql, (topic, subscription, broker_id))

    def idle_links(self, topic: str, subscription: str) -> set[str]:
        rows = self._query(
            "SELECT broker_id FROM spread_idle_links WHERE topic = ? AND subscription = ?",
            (topic, subscription),
        )
        return {str(row[0]) for row in rows}

    def pin_lookup(self, topic: str, host: str, seconds: float) -> None:
        with self._write() as db:
            db.execute("DELETE FROM spread_pinned_lookups WHERE until <= ?", (self._clock(),))
            db.execute(
                "INSERT INTO spread_pinned_lookups (topic, host, pending, until) VALUES (?, ?, 1, ?)"
                " ON CONFLICT (topic, host) DO UPDATE SET pending = pending + 1, until = excluded.until",
                (topic, host, self._clock() + seconds),
            )

    def take_pinned_lookup(self, topic: str, host: str) -> bool:
        # A read first: the lookups of a spread topic are many, its refused producers few.
        sql = "SELECT 1 FROM spread_pinned_lookups WHERE topic = ? AND host = ? AND until > ?"
        if not self._query(sql, (topic, host, self._clock())):
            return False
        with self._write() as db:
            taken = db.execute(
                "UPDATE spread_pinned_lookups SET pending = pending - 1"
                " WHERE topic = ? AND host = ? AND until > ? AND pending > 0",
                (topic, host, self._clock()),
            ).rowcount
            db.execute("DELETE FROM spread_pinned_lookups WHERE pending <= 0")
        return bool(taken)

    # -- topics that exist only while loaded ---------------------------------------------------------
    def topic_loaded(self, broker_id: str, topic: str, loaded: bool) -> None:
        with self._write() as db:
            if loaded:
                sql = "INSERT OR REPLACE INTO loaded_topics (topic, broker_id) VALUES (?, ?)"
                db.execute(sql, (topic, broker_id))
            else:
                db.execute("DELETE FROM loaded_topics WHERE topic = ? AND broker_id = ?", (topic, broker_id))

    def loaded_topics(self, prefix: str) -> list[str]:
        rows = self._query(
            "SELECT t.topic FROM loaded_topics t JOIN brokers b ON b.broker_id = t.broker_id"
            " WHERE substr(t.topic, 1, ?) = ? AND b.lease_until > ? ORDER BY t.topic",
            (len(prefix), prefix, self._clock()),
        )
        return [str(row[0]) for row in rows]

    # -- change notices ---------------------------------------------------------------------------
    def publish_change(self, path: str) -> None:
        with self._write() as db:
            self._changed(db, path)

    @staticmethod
    def _changed(db: sqlite3.Connection, path: str) -> None:
        db.execute("INSERT INTO changes (path) VALUES (?)", (path,))
        # Keep the last thousand: a broker further behind re-reads everything (changes_since).
        db.execute("DELETE FROM changes WHERE version <= (SELECT max(version) - 1000 FROM changes)")

    def changes_since(self, version: int) -> tuple[int, list[str]]:
        rows = self._query("SELECT version, path FROM changes WHERE version > ? ORDER BY version", (version,))
        if not rows:
            return version, []
        first = int(str(rows[0][0]))
        paths = [str(path) for _, path in rows]
        if version and first > version + 1:
            paths.append("*")  # some were dropped: everything may have changed
        return int(str(rows[-1][0])), paths

    def close(self) -> None:
        with self._lock:
            self._db.close()
