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
    last = ml.last_confirmed
    end = ml.next_position(last)
    # (ledger id, readable entries): the current ledger only up to the last durable entry.
    ledgers = []
    for info in ml.ledgers():
        count = info.entries
        if info.ledger_id == last.ledger_id:
            count = last.entry_id + 1
        elif info.ledger_id > last.ledger_id:
            count = 0
        if count > 0:
            ledgers.append((info.ledger_id, count))
    if not ledgers:
        return end

    def time_at(ledger_id: int, entry_id: int) -> int:
        return entry_time(ml.read_entry(Position(ledger_id, entry_id)).data)

    # The first ledger whose last entry is at or after the time, then the entry inside it.
    li = _first_index(len(ledgers), lambda i: time_at(ledgers[i][0], ledgers[i][1] - 1) >= timestamp_ms)
    if li == len(ledgers):
        return end
    ledger_id, count = ledgers[li]
    return Position(ledger_id, _first_index(count, lambda e: time_at(ledger_id, e) >= timestamp_ms))
