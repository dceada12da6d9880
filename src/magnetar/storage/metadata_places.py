"""The ``place_pages`` table (and the ``places`` rows from before pages): where each cursor's
places are stored (``places.py``)."""

from __future__ import annotations

from collections.abc import Iterable

from magnetar.storage.group_commit import GroupCommit

#: One cursor's place changes: (cursor, cleared, [(page, encoded page)], [pages to delete]).
PlaceChanges = tuple[str, bool, list[tuple[int, bytes]], list[int]]


class PlaceTable:
    """The metadata store's place rows (a part of ``MetadataStore``)."""

    _commits: GroupCommit
    #: Transactions that wrote places (``write_places``), for tests and stats.
    place_writes = 0

    def places(self, ml_id: int, cursor: str) -> list[tuple[str, bytes]]:
        """A cursor's places stored one per row, as before pages: ``(name, encoded place)``
        (read once, to be rewritten as pages)."""
        sql = "SELECT name, state FROM places WHERE ml_id = ? AND cursor = ?"
        return [(name, state) for name, state in self._commits.query(sql, (ml_id, cursor))]

    def place_pages(self, ml_id: int, cursor: str) -> list[tuple[int, bytes]]:
        """The stored place pages of a cursor: ``(page, bytes)``."""
        sql = "SELECT page, data FROM place_pages WHERE ml_id = ? AND cursor = ?"
        return [(page, data) for page, data in self._commits.query(sql, (ml_id, cursor))]

    def write_places(self, ml_id: int, changes: Iterable[PlaceChanges]) -> None:
        """Apply the place changes of several cursors in one transaction (one commit, one fsync).

        Each change is ``(cursor, cleared, write, gone)``: with ``cleared`` the cursor's stored
        places are deleted first; ``write`` holds ``(page, bytes)``, ``gone`` pages to delete.
        """
        with self._commits.transaction() as db:
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
