"""Settings of the storage layer; docs/storage.md explains each one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FSYNC_POLICIES = ("always", "interval", "never")


@dataclass
class StorageConfig:
    """Where data lives, when it is fsynced, when ledgers roll over and how long consumed data stays.

    Retention follows Pulsar: a consumed ledger is deleted once it is past any
    retention limit that is set. 0 means "not set" (both 0: delete once consumed),
    a negative value means "no limit" on that dimension.
    """

    data_dir: Path
    fsync_policy: str = "always"
    fsync_interval_ms: float = 10.0
    #: ``always``: group-commit rounds run on the owner's event loop (when it offers a hook)
    #: while they take less than this on average, on the fsync thread above it; 0: always the thread.
    fsync_inline_max_ms: float = 2.0
    #: Zeros written ahead of a ledger's end so that fsyncs of small appends need no metadata
    #: commit (``always`` policy only: elsewhere fsyncs are rare or absent).
    preallocate_bytes: int = 4 * 1024 * 1024
    max_ledger_size_bytes: int = 128 * 1024 * 1024
    max_ledger_age_seconds: float = 4 * 3600
    retention_time_seconds: float = 0.0
    retention_size_bytes: int = 0
    entry_cache_bytes: int = 32 * 1024 * 1024
    #: PIP 81: memory for one durable cursor's ack pages; least recently used pages are swapped out past it.
    max_individual_ack_cache_bytes_per_cursor: int = 3 * 1024 * 1024
    #: A cursor ledger is rolled once it is past this size and holds over twice its live data.
    cursor_ledger_min_roll_bytes: int = 4 * 1024 * 1024
    #: Adds are refused (StorageFullError) while the data directory's filesystem has less
    #: free than this, before it is actually full; 0: only a real "no space" refuses them.
    min_free_disk_bytes: int = 0

    def __post_init__(self) -> None:
        if self.preallocate_bytes > 64 * 1024 * 1024:
            raise ValueError("preallocate_bytes must be at most 64 MiB")
        self.data_dir = Path(self.data_dir)
        if self.fsync_policy not in FSYNC_POLICIES:
            raise ValueError(f"fsync_policy must be one of {FSYNC_POLICIES}, not {self.fsync_policy!r}")
        if self.fsync_interval_ms < 0:
            raise ValueError("fsync_interval_ms must not be negative")
        if self.fsync_inline_max_ms < 0:
            raise ValueError("fsync_inline_max_ms must not be negative")
        if self.preallocate_bytes < 0:
            raise ValueError("preallocate_bytes must not be negative")
        if self.max_ledger_size_bytes <= 0:
            raise ValueError("max_ledger_size_bytes must be positive")
        if self.max_ledger_age_seconds <= 0:
            raise ValueError("max_ledger_age_seconds must be positive")
        if self.entry_cache_bytes < 0:
            raise ValueError("entry_cache_bytes must not be negative")
        if self.max_individual_ack_cache_bytes_per_cursor < 0:
            raise ValueError("max_individual_ack_cache_bytes_per_cursor must not be negative")
        if self.min_free_disk_bytes < 0:
            raise ValueError("min_free_disk_bytes must not be negative")
        if self.cursor_ledger_min_roll_bytes < 0:
            raise ValueError("cursor_ledger_min_roll_bytes must not be negative")
