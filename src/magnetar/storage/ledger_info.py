"""What is known about one ledger of a managed ledger."""

from __future__ import annotations

from dataclasses import dataclass


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
