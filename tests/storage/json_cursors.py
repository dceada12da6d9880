"""Cursors stored as schema 1 stored them (one JSON row each), for the migration tests: the
broker never writes this form any more, so the store has no method for it."""

from __future__ import annotations

from collections.abc import Iterable

from magnetar.storage.cursor_state import CursorState
from magnetar.storage.metadata_store import MetadataStore


def save_json_cursors(store: MetadataStore, ml_id: int, states: Iterable[tuple[str, CursorState]]) -> None:
    rows = [
        (ml_id, name, s.mark_delete.ledger_id, s.mark_delete.entry_id, s.ranges_json(), s.batch_json())
        for name, s in states
    ]
    if not rows:
        return
    with store._commits.transaction() as db:
        db.executemany(
            "INSERT OR REPLACE INTO cursors (ml_id, name, md_ledger, md_entry, individually_deleted,"
            " batch_acks) VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
