"""Where each cursor's virtual cursors are stored (``virtual_cursors.py``): the ``place_pages`` table,
one row per bucket, and the ``places`` rows of before buckets. The tables keep their first names so
that existing data directories open unchanged."""

from __future__ import annotations

from collections.abc import Iterable

from magnetar.storage.group_commit import GroupCommit

#: One cursor's changes: (cursor, cleared, [(bucket, encoded bucket)], [buckets to delete]).
VirtualCursorChanges = tuple[str, bool, list[tuple[int, bytes]], list[int]]


class VirtualCursorTable:
    """The metadata store's virtual cursor rows (a part of ``MetadataStore``)."""

    _commits: GroupCommit
    #: Transactions that wrote virtual cursors (``write_virtual_cursors``), for tests and stats.
    virtual_cursor_writes = 0

    def unbucketed_virtual_cursors(self, ml_id: int, cursor: str) -> list[tuple[str, bytes]]:
        """A cursor's virtual cursors stored one per row, as before buckets: ``(name, encoded state)``
        (read once, to be rewritten as pages)."""
        sql = "SELECT name, state FROM places WHERE ml_id = ? AND cursor = ?"
        return [(name, state) for name, state in self._commits.query(sql, (ml_id, cursor))]

    def virtual_cursor_buckets(self, ml_id: int, cursor: str) -> list[tuple[int, bytes]]:
        """The stored buckets of a cursor's virtual cursors: ``(bucket, bytes)``."""
        sql = "SELECT page, data FROM place_pages WHERE ml_id = ? AND cursor = ?"
        return [(page, data) for page, data in self._commits.query(sql, (ml_id, cursor))]

    def write_virtual_cursors(self, ml_id: int, changes: Iterable[VirtualCursorChanges]) -> None:
        """Apply the virtual cursor changes of several cursors in one transaction (one commit, one fsync).

        Each change is ``(cursor, cleared, write, gone)``: with ``cleared`` the cursor's stored
        virtual cursors are deleted first; ``write`` holds ``(bucket, bytes)``, ``gone`` buckets to delete.
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
        self.virtual_cursor_writes += 1

    def virtual_cursor_bucket_everywhere(
        self, ml_id: int, cursor: str, bucket: int, exclude: str
    ) -> list[tuple[str, bytes]]:
        """Bucket ``bucket`` of ``cursor``'s virtual cursors as each writer but ``exclude`` stored
        it (the owner's and each follower's, ``follower_key``): ``(key, bytes)``. One indexed
        look-up of the managed ledger's buckets of that number (every cursor's), sorted out here:
        a range on the key in the query made SQLite walk far more of the index."""
        low, high = family_range(cursor)
        sql = (
            "SELECT cursor, data FROM place_pages INDEXED BY place_pages_by_page WHERE ml_id = ? AND page = ?"
        )
        return [
            (key, data)
            for key, data in self._commits.query(sql, (ml_id, bucket))
            if (key == cursor or low <= key < high) and key != exclude
        ]


#: Between a cursor's name and a follower's name in the key of the virtual cursors that follower
#: keeps on the cursor (``follower_key``): a byte no cursor name made by hand has.
FOLLOWER_SEPARATOR = "\x00"


def follower_key(cursor: str, follower: str) -> str:
    """Where ``follower`` (a broker serving the cursor's consumers without owning its topic) keeps
    the virtual cursors of its consumers: apart from the cursor's writer, one writer per row."""
    return f"{cursor}{FOLLOWER_SEPARATOR}{follower}"


def family_range(cursor: str) -> tuple[str, str]:
    """The keys ``follower_key(cursor, ...)`` lie in: ``low <= key < high``."""
    return cursor + FOLLOWER_SEPARATOR, cursor + chr(ord(FOLLOWER_SEPARATOR) + 1)
