"""Errors raised by the storage layer."""

from __future__ import annotations

import threading
from collections.abc import Callable


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


class OffloadedReadPending(StorageError):
    """The bytes of an offloaded ledger that a read needs are being fetched from the object store.

    Nothing was read. ``ready`` is set once the fetch is over (done or failed). ``then(call)``
    calls ``call`` (on the fetching thread, or at once) when it is over, or earlier when the store
    is found failing meanwhile: the caller reads again then, which reads the bytes or fails at
    once. A dispatcher on the event loop is told through the managed ledger's
    ``on_offloaded_data`` instead; an answer that may not block the loop (a seek, a peek) awaits
    ``then`` (``broker/offloaded_reads.py``).
    """

    def __init__(
        self, message: str, ready: threading.Event, then: Callable[[Callable[[], None]], None]
    ) -> None:
        super().__init__(message)
        self.ready = ready
        self.then = then


class OffloadedReadError(StorageError):
    """An offloaded ledger cannot be read now: the object store failed, timed out, or none is
    configured. Local ledgers are not affected; the read may be tried again later."""
