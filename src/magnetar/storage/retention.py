"""Which consumed ledgers retention lets go of."""

from __future__ import annotations

from magnetar.storage.ledger_info import LedgerInfo
from magnetar.storage.position import Position


def consumed_ledgers(closed: list[LedgerInfo], slowest: Position) -> list[LedgerInfo]:
    """The closed ledgers (oldest first) wholly at or before ``slowest``, the slowest mark-delete position."""
    consumed = []
    for info in closed:
        if info.ledger_id > slowest.ledger_id:
            break
        if info.ledger_id == slowest.ledger_id and slowest.entry_id < info.entries - 1:
            break
        consumed.append(info)
    return consumed


def past_retention(
    consumed: list[LedgerInfo], retention_time_seconds: float, retention_size_bytes: int, now: float
) -> list[LedgerInfo]:
    """The oldest consumed ledgers that may be deleted, oldest first.

    As in Pulsar, a consumed ledger goes once it is past any limit that is set:
    older than ``retention_time_seconds`` (counted from when it was closed), or
    while the consumed data kept would still exceed ``retention_size_bytes``.
    0 means the limit is not set; both 0 means "delete once consumed"; a
    negative value means no limit on that dimension.
    """
    if retention_time_seconds == 0 and retention_size_bytes == 0:
        return list(consumed)
    kept_bytes = sum(info.size_bytes for info in consumed)
    doomed = []
    for info in consumed:
        age = now - (info.closed_at if info.closed_at is not None else info.created_at)
        expired = retention_time_seconds > 0 and age > retention_time_seconds
        over_size = retention_size_bytes > 0 and kept_bytes > retention_size_bytes
        if not (expired or over_size):
            break
        doomed.append(info)
        kept_bytes -= info.size_bytes
    return doomed


def deletable_ledgers(
    closed: list[LedgerInfo],
    slowest: Position,
    retention_time_seconds: float,
    retention_size_bytes: int,
    now: float,
) -> list[int]:
    """The ids of the closed ledgers (oldest first) that are consumed up to ``slowest`` and that
    retention lets go of."""
    consumed = consumed_ledgers(closed, slowest)
    return [
        info.ledger_id for info in past_retention(consumed, retention_time_seconds, retention_size_bytes, now)
    ]
