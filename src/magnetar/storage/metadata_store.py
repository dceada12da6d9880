"""Durable metadata in SQLite: managed ledgers, their ledgers, cursors, virtual cursors and properties.

``MetadataStore`` is the one object the rest of storage (and the broker) talk to: the SQL of
each table lives in a module of its own (``metadata_*.py``), the connection and the group
commit the frequent writes share in ``group_commit.py``, the schema in ``metadata_schema.py``.
"""

from __future__ import annotations

from pathlib import Path

from magnetar.storage.group_commit import GroupCommit
from magnetar.storage.metadata_cursors import CursorTable, StoredCursor
from magnetar.storage.metadata_ledgers import LedgerTable
from magnetar.storage.metadata_managed_ledgers import ManagedLedgerRecord, ManagedLedgerTable
from magnetar.storage.metadata_schema import bring_up_to_date
from magnetar.storage.metadata_values import BrokerValueTable, PropertyTable
from magnetar.storage.metadata_virtual_cursors import VirtualCursorTable

__all__ = ["ManagedLedgerRecord", "MetadataStore", "StoredCursor"]


class MetadataStore(
    ManagedLedgerTable, LedgerTable, CursorTable, VirtualCursorTable, PropertyTable, BrokerValueTable
):
    """Every table's rows, over one SQLite connection shared by every thread of a Storage."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._commits = GroupCommit(self.path)
        with self._commits.transaction() as db:
            bring_up_to_date(db, self.path)

    def close(self) -> None:
        self._commits.close()
