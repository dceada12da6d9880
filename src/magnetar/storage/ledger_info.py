"""What is known about one ledger of a managed ledger."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.storage.position import Position


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
