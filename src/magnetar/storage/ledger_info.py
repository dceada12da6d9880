"""What is known about one ledger of a managed ledger."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.storage.position import Position

#: An offload's states: its object is being written (not yet to be trusted), or written and verified.
OFFLOADING = "offloading"
OFFLOADED = "offloaded"


@dataclass(frozen=True, slots=True)
class Offload:
    """Where a ledger's copy in the object store is (docs/tiered-storage.md).

    ``key`` names one object, the ledger's log followed by its index, written once by one offload
    attempt (a retry writes another key). ``object_size`` and ``checksum`` (CRC32C of the whole
    object) are what was verified against the local files; ``local_deleted``: the local files are
    gone and reads go to the object store.
    """

    key: str
    state: str = OFFLOADING
    object_size: int = 0
    checksum: int = 0
    offloaded_at: float | None = None
    local_deleted: bool = False

    @property
    def complete(self) -> bool:
        return self.state == OFFLOADED


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    """A snapshot: the open ledger's counts keep moving after it is taken.

    ``size_bytes`` counts the segment file, record headers included, which is what
    retention by size measures. ``closed_at`` (wall-clock seconds) is when the ledger
    was rolled over; retention by time counts from it.
    """

    ledger_id: int
    entries: int
    size_bytes: int
    created_at: float
    closed: bool
    closed_at: float | None = None
    #: Its copy in the object store; None: local only.
    offload: Offload | None = None

    @property
    def offloaded(self) -> bool:
        """Whether a verified copy is in the object store (Pulsar's ``offloaded`` in internalStats)."""
        return self.offload is not None and self.offload.complete

    @property
    def local(self) -> bool:
        """Whether its files are on the local disk."""
        return self.offload is None or not self.offload.local_deleted


def bytes_after(infos: list[LedgerInfo], position: Position) -> int:
    """Estimated bytes of the entries after ``position`` in ``infos``' ledgers: whole ledgers
    after its own, and of its own ledger the share of entries after it."""
    total = 0
    for info in infos:
        if info.ledger_id > position.ledger_id:
            total += info.size_bytes
        elif info.ledger_id == position.ledger_id and info.entries:
            after = info.entries - (position.entry_id + 1)
            total += info.size_bytes * max(after, 0) // info.entries
    return total
