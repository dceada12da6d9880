"""Finding positions for seek: by message id and by time (binary search, not a scan)."""

from __future__ import annotations

from magnetar.broker.entry_search import (
    EntryReader,
    EntrySpace,
    entry_time,
    first_readable,
    reader_for,
)
from magnetar.broker.errors import NotAllowed
from magnetar.broker.ids import is_earliest, is_latest, position_of
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata
from magnetar.storage.errors import EntryNotFoundError
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position

__all__ = ["entry_time", "last_message_position", "position_for_message_id", "position_for_time"]


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
        # Ledger ids are broker-wide: a ledger this topic never had below its oldest one was
        # trimmed away (seek to the oldest data left); any other belongs to another topic.
        first = ml.first_position()
        oldest = min(known, default=None)
        if oldest is not None and position.ledger_id < oldest:
            return first or end
        raise NotAllowed(f"message id {position} does not belong to topic {ml.name}")
    return position


def position_for_time(ml: ManagedLedger, timestamp_ms: int, read: EntryReader | None = None) -> Position:
    """First entry whose time is >= ``timestamp_ms``, or the next position to be written.

    An entry's time is its broker timestamp, or its publish time when stored without one.
    Broker timestamps never decrease along a topic partition, so a binary search over the
    readable entries (all ledgers as one sequence) reads O(log n) of them. ``read`` lets a
    caller count the reads (see ``entry_search.CountingReader``).
    """
    read = reader_for(ml, read)
    space = EntrySpace(ml)
    found = first_readable(space, read, lambda data: entry_time(data) >= timestamp_ms)
    if found == space.size:
        return ml.next_position(ml.last_confirmed)
    return space.position(found)


def last_message_position(ml: ManagedLedger, read: EntryReader | None = None) -> tuple[Position, int]:
    """The last stored entry and the batch index of its last message (-1 if not a batch, or
    unknown: a damaged last entry is still the last position, as reads pass over it)."""
    last = ml.last_confirmed
    if last.entry_id < 0:
        return last, -1
    try:
        _, producer_bytes = split_entry_metadata(reader_for(ml, read)(last))
        metadata, _ = parse_metadata(producer_bytes)
    except (ProtocolError, EntryNotFoundError):
        return last, -1
    if metadata.HasField("num_messages_in_batch"):
        return last, metadata.num_messages_in_batch - 1
    return last, -1
