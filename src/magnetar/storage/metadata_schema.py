"""The metadata store's tables, as SQLite keeps them; existing data directories open with it.

Schema 1 kept each cursor in one JSON row; schema 2 adds ``cursors.cursor_ledger`` (PIP 81
cursor ledgers); schema 3 adds where each ledger lives (``ledgers.offload_*``, tiered storage) and
``offload_garbage``, the objects to delete. Every store is brought to the newest on opening. The
index of virtual cursor buckets by bucket number (``place_pages_by_page``: one bucket of every
writer of a cursor in one look-up, ``virtual_cursors_elsewhere``) is made on opening too; older
code ignores it.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 3  # 2: cursors.cursor_ledger (PIP 81 cursor ledgers); 3: ledgers.offload_* (tiered storage)

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
CREATE INDEX IF NOT EXISTS place_pages_by_page ON place_pages (ml_id, page, cursor);
CREATE TABLE IF NOT EXISTS offload_garbage (
    key TEXT PRIMARY KEY,
    queued_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


#: Schema 3: a ledger's copy in the object store (``ledger_info.Offload``); NULL key: local only.
_OFFLOAD_COLUMNS = (
    ("offload_key", "TEXT"),
    ("offload_state", "TEXT"),
    ("offload_size", "INTEGER NOT NULL DEFAULT 0"),
    ("offload_checksum", "INTEGER NOT NULL DEFAULT 0"),
    ("offloaded_at", "REAL"),
    ("local_deleted", "INTEGER NOT NULL DEFAULT 0"),
)


def bring_up_to_date(db: sqlite3.Connection, path: object) -> None:
    """Create what is missing and upgrade an older schema, in the caller's transaction;
    RuntimeError for a store written by newer code (``path`` names it)."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise RuntimeError(f"{path} has schema {version}, newer than this code's {SCHEMA_VERSION}")
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    columns = {row[1] for row in db.execute("PRAGMA table_info(cursors)")}
    if "cursor_ledger" not in columns:  # schema 1: every cursor is one JSON row
        db.execute("ALTER TABLE cursors ADD COLUMN cursor_ledger INTEGER")
    ledger_columns = {row[1] for row in db.execute("PRAGMA table_info(ledgers)")}
    for column, kind in _OFFLOAD_COLUMNS:
        if column not in ledger_columns:  # schema 2: every ledger is local
            db.execute(f"ALTER TABLE ledgers ADD COLUMN {column} {kind}")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
