"""Settings of the storage layer; docs/storage.md explains each one.

A pydantic dataclass in strict mode: each setting's type and range are declared beside it and
checked when the settings are made (a ``ValidationError``, a ``ValueError``, naming the setting).
The broker's settings (``broker/config.py``) take these settings' types and defaults from here, so
they are written once.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, Strict
from pydantic.dataclasses import dataclass

MIB = 1024 * 1024

#: Checked, not converted: a string is no number, a number no flag (``"false"`` would be true).
STRICT = ConfigDict(strict=True)

FsyncPolicy = Literal["always", "interval", "never"]
FSYNC_POLICIES: tuple[str, ...] = typing.get_args(FsyncPolicy)
#: A directory, given as a path or as text (TOML and environment variables write text).
Directory = Annotated[Path, Strict(False)]
#: Bytes, seconds and milliseconds that may be 0 (0 usually means "off" or "no limit").
NonNegativeInt = Annotated[int, Field(ge=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
#: Preallocation is bounded: the zeros are written at once when a ledger opens.
PreallocateBytes = Annotated[int, Field(ge=0, le=64 * MIB)]


@dataclass(config=STRICT)
class StorageConfig:
    """Where data lives, when it is fsynced, when ledgers roll over and how long consumed data stays.

    Retention follows Pulsar: a consumed ledger is deleted once it is past any
    retention limit that is set. 0 means "not set" (both 0: delete once consumed),
    a negative value means "no limit" on that dimension.
    """

    data_dir: Directory
    fsync_policy: FsyncPolicy = "always"
    fsync_interval_ms: NonNegativeFloat = 10.0
    #: ``always``: group-commit rounds run on the owner's event loop (when it offers a hook)
    #: while they take less than this on average, on the fsync thread above it; 0: always the thread.
    fsync_inline_max_ms: NonNegativeFloat = 2.0
    #: Zeros written ahead of a ledger's end so that fsyncs of small appends need no metadata
    #: commit (``always`` policy only: elsewhere fsyncs are rare or absent). At most 64 MiB.
    preallocate_bytes: PreallocateBytes = 4 * MIB
    max_ledger_size_bytes: PositiveInt = 128 * MIB
    max_ledger_age_seconds: PositiveFloat = 4 * 3600.0
    retention_time_seconds: float = 0.0
    retention_size_bytes: int = 0
    entry_cache_bytes: NonNegativeInt = 32 * MIB
    #: PIP 81: memory for one durable cursor's ack pages; least recently used pages are swapped out past it.
    max_individual_ack_cache_bytes_per_cursor: NonNegativeInt = 3 * MIB
    #: A cursor ledger is rolled once it is past this size and holds over twice its live data.
    cursor_ledger_min_roll_bytes: NonNegativeInt = 4 * MIB
    #: Adds are refused (StorageFullError) while the data directory's filesystem has less
    #: free than this, before it is actually full; 0: only a real "no space" refuses them.
    min_free_disk_bytes: NonNegativeInt = 0
    #: Tiered storage (docs/tiered-storage.md): memory for blocks of offloaded ledgers read from the
    #: object store, all managed ledgers together; the least recently used go first.
    offload_read_cache_bytes: NonNegativeInt = 64 * MIB
    #: The unit of range reads from the object store (Pulsar's managedLedgerOffloadReadBufferSizeInBytes).
    offload_read_block_bytes: PositiveInt = MIB
    #: Blocks fetched ahead of the ones a read needs (Pulsar's managedLedgerOffloadPrefetchRounds).
    offload_prefetch_blocks: NonNegativeInt = 1
    #: After a failed read from the object store, reads of offloaded data fail at once this long.
    offload_read_retry_seconds: NonNegativeFloat = 5.0
    #: The longest a read that waits (a seek, an admin look-up) waits for offloaded bytes.
    offload_read_timeout_seconds: PositiveFloat = 30.0
