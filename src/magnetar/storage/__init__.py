"""magnetar.storage: durable managed ledgers and cursors, in Pulsar's vocabulary.

Synchronous and free of the protocol and of asyncio: the broker hands
completions back to its loop through the ``notify`` argument of ``Storage``.
docs/storage.md describes the on-disk layout, group commit and recovery.
"""

from magnetar.storage.config import StorageConfig
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.entry import Entry
from magnetar.storage.errors import (
    CorruptionError,
    EntryNotFoundError,
    ManagedLedgerFencedError,
    StorageClosedError,
    StorageError,
)
from magnetar.storage.ledger_info import LedgerInfo
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.position import Position
from magnetar.storage.store import Storage

__all__ = [
    "CorruptionError",
    "Entry",
    "EntryNotFoundError",
    "LedgerInfo",
    "ManagedCursor",
    "ManagedLedger",
    "ManagedLedgerFencedError",
    "MetadataStore",
    "Position",
    "Storage",
    "StorageClosedError",
    "StorageConfig",
    "StorageError",
]
