"""The ``cursors`` table: which cursor ledger holds each durable cursor's state."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.storage.cursor_state import CursorState
from magnetar.storage.group_commit import GroupCommit
from magnetar.storage.metadata_virtual_cursors import family_range
from magnetar.storage.position import Position


@dataclass(frozen=True, slots=True)
class StoredCursor:
    """A cursor's row: its cursor ledger, or (``cursor_ledger`` None) its state in the earlier JSON form.

    For a cursor with a cursor ledger, ``state`` holds only the mark-delete
    position as of the last switch of cursor ledger; the cursor ledger's marker
    is what counts.
    """

    state: CursorState
    cursor_ledger: int | None


class CursorTable:
    """The metadata store's cursor rows (a part of ``MetadataStore``)."""

    _commits: GroupCommit

    def cursors(self, ml_id: int) -> dict[str, StoredCursor]:
        rows = self._commits.query(
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
        self._commits.grouped(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO cursors (ml_id, name, md_ledger, md_entry, individually_deleted,"
                " batch_acks, cursor_ledger) VALUES (?, ?, ?, ?, '[]', '[]', ?)",
                (ml_id, name, mark_delete.ledger_id, mark_delete.entry_id, cursor_ledger),
            )
        )

    def delete_cursor(self, ml_id: int, name: str) -> None:
        """Forget a cursor and its virtual cursors (``virtual_cursors.py``) in one commit."""
        with self._commits.transaction() as db:
            db.execute("DELETE FROM cursors WHERE ml_id = ? AND name = ?", (ml_id, name))
            db.execute("DELETE FROM places WHERE ml_id = ? AND cursor = ?", (ml_id, name))
            db.execute("DELETE FROM place_pages WHERE ml_id = ? AND cursor = ?", (ml_id, name))
            # and what followers kept on it (``metadata_virtual_cursors.follower_key``)
            low, high = family_range(name)
            db.execute(
                "DELETE FROM place_pages WHERE ml_id = ? AND cursor >= ? AND cursor < ?", (ml_id, low, high)
            )
