"""Errors raised by the storage layer."""


class StorageError(Exception):
    """Base class: something in storage went wrong."""


class StorageClosedError(StorageError):
    """The Storage, managed ledger or cursor was closed; open it again to go on."""


class ManagedLedgerFencedError(StorageError):
    """A write or fsync failed, so adds are refused for now.

    After a failed fsync the kernel may have dropped the dirty pages, so nothing
    written since can be trusted to reach the disk: the managed ledger drops every
    unconfirmed entry before it takes adds again (docs/storage.md, Failures).
    """


class EntryNotFoundError(StorageError, KeyError):
    """No readable entry at that position (never written, not yet durable, or trimmed).

    A KeyError (so a LookupError too), as a missing key in a mapping of positions would be.
    """


class CorruptionError(StorageError):
    """Bytes on disk do not match their checksum or index where they must."""


class MissingLedgerError(CorruptionError):
    """A closed ledger's log file is gone: its ``entries`` entries cannot be read."""

    def __init__(self, message: str, ledger_id: int, entries: int) -> None:
        super().__init__(message)
        self.ledger_id = ledger_id
        self.entries = entries


class StorageFullError(StorageError):
    """The data directory's filesystem has no room (ENOSPC, SQLITE_FULL, or below the
    configured free-space threshold). Nothing was written; the same write can succeed
    once space is freed, without reopening anything."""


class MetadataMissingError(StorageError):
    """Ledger directories exist that the metadata store does not know, and it knows none at all.

    The metadata was deleted, lost or replaced: starting would either hide or destroy every
    topic's data. Nothing is touched; ``magnetar repair`` rebuilds the metadata from the files.
    """


class ManagedLedgerNotFoundError(StorageError):
    """A managed ledger asked for by name is not stored (a follower opens only what its owner made)."""
