"""Finding positions for seek: by message id and by time (binary search, not a scan)."""

from __future__ import annotations

from collections.abc import Callable

from magnetar.broker.errors import NotAllowed
from magnetar.broker.ids import is_earliest, is_latest, position_of
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position


def position_for_message_id(ml: ManagedLedger, msg_id: wire.MessageIdData) -> Position:
    """First entry to deliver after seeking to ``msg_id`` (its own entry: the client filters inside)."""
    end = ml.next_position(ml.last_confirmed)
    if is_earliest(msg_id):
        return ml.first_position() or end
    if is_latest(msg_id):
        return end
    position = position_of(msg_id)
    known = {info.ledger_id for info in ml.ledgers()}
    if position.ledger_id not in known:
        first = ml.first_position()
        if position > ml.last_confirmed:
            return end
        if first is not None and position < first:
            return first  # trimmed away: the oldest data left
        raise NotAllowed(f"message id {position} does not belong to topic {ml.name}")
    return position


def entry_time(data: bytes) -> int:
    """Broker timestamp when the entry has one, else the producer's publish time."""
    try:
        meta, producer_bytes = split_entry_metadata(data)
        if meta is not None and meta.HasField("broker_timestamp"):
            return meta.broker_timestamp
        metadata, _ = parse_metadata(producer_bytes)
        return metadata.publish_time
    except ProtocolError:
        return 0


def _first_index(count: int, is_at_or_after: Callable[[int], bool]) -> int:
    """Smallest i in [0, count) with is_at_or_after(i), or count; the predicate is monotonic."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if is_at_or_after(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def position_for_time(ml: ManagedLedger, timestamp_ms: int) -> Position:
    """First entry whose time is >= timestamp_ms, in O(log ledgers + log entries) reads."""
    ledgers = [info for info in ml.ledgers() if info.entries > 0]
    end = ml.next_position(ml.last_confirmed)
    if not ledgers:
        return end

    def ledger_ends_before(i: int) -> bool:
        info = ledgers[i]
        last = Position(info.ledger_id, info.entries - 1)
        return entry_time(ml.read_entry(last).data) >= timestamp_ms

    li = _first_index(len(ledgers), ledger_ends_before)
    if li == len(ledgers):
        return end
    info = ledgers[li]
    ei = _first_index(
        info.entries,
        lambda e: entry_time(ml.read_entry(Position(info.ledger_id, e)).data) >= timestamp_ms,
    )
    return Position(info.ledger_id, ei)
