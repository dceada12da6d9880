"""Which closed ledgers an offload takes (pure: tested without files)."""

from __future__ import annotations

from magnetar.storage.ledger_info import LedgerInfo


def over_threshold(
    ledgers: list[LedgerInfo], threshold_bytes: int, threshold_seconds: float = -1, now: float = 0.0
) -> list[LedgerInfo]:
    """The closed, local-only ledgers to offload, oldest first: those beyond Pulsar's
    ``offloadThreshold`` (at most ``threshold_bytes`` stay local; -1: not by size, 0: every closed
    ledger), and those closed ``threshold_seconds`` or longer before ``now`` (Pulsar's
    ``offloadThresholdInSeconds``; -1: not by age). Either rule is enough, as in Pulsar.

    ``ledgers`` are the managed ledger's, oldest first, the open one last. Walking from the newest,
    once the ledgers seen so far (this one included) hold more than the threshold, this ledger and
    every older one go (as ``pulsar-admin topics offload --size-threshold`` picks them); a ledger
    already offloaded or being offloaded is passed over.
    """
    if threshold_bytes < 0 and threshold_seconds < 0:
        return []
    kept = 0
    chosen: list[LedgerInfo] = []
    for info in reversed(ledgers):
        kept += info.size_bytes
        if not info.closed or info.offload is not None:
            continue
        by_size = threshold_bytes == 0 or 0 < threshold_bytes < kept
        by_age = (
            threshold_seconds >= 0
            and info.closed_at is not None
            and now - info.closed_at >= threshold_seconds
        )
        if by_size or by_age:
            chosen.append(info)
    chosen.reverse()
    return chosen


def before_ledger(ledgers: list[LedgerInfo], ledger_id: int) -> list[LedgerInfo]:
    """The closed, local-only ledgers before ``ledger_id``, oldest first: what an offload up to a
    message id takes (Pulsar's ``PUT .../offload``: every ledger before the one it names)."""
    return [info for info in ledgers if info.ledger_id < ledger_id and info.closed and info.offload is None]


def first_unoffloaded(ledgers: list[LedgerInfo]) -> LedgerInfo | None:
    """The oldest ledger without a complete offload (the offload status's ``firstUnoffloadedMessage``)."""
    return next((info for info in ledgers if not info.offloaded), None)


def past_deletion_lag(ledgers: list[LedgerInfo], lag_seconds: float, now: float) -> list[LedgerInfo]:
    """Offloaded ledgers whose local files may go now: verified ``lag_seconds`` ago or longer
    (Pulsar's ``offloadDeletionLag``; < 0: the local copy is kept)."""
    if lag_seconds < 0:
        return []
    return [
        info
        for info in ledgers
        if info.offload is not None
        and info.offload.complete
        and not info.offload.local_deleted
        and info.offload.offloaded_at is not None
        and now - info.offload.offloaded_at >= lag_seconds
    ]
