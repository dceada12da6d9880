"""readCompacted for a single-active dispatcher, as Pulsar's ``CompactedTopicImpl.asyncReadEntriesOrWait``.

While the cursor's read position is at or before the compaction horizon, entries come from the
compacted ledger, with their original positions, and the cursor is moved (exactly: ``seek_exactly``,
its ledger may be trimmed) past the last one read; those it has acknowledged are left out (in
ledgers trimmed since too: the cursor keeps those acknowledgements, ``storage/cursor.py``); once the
view has nothing more, the cursor goes to the entry after the horizon and the topic is read as
usual. So a consumer gets the latest message of each key up to the horizon, then everything after
it, with the original message ids. A subscription that starts in the view before the topic's first
entry is placed there when it subscribes (``topic_subscriptions.py``), and a rewind (a reconnect, a
redelivery, a failover) goes back to just after its mark-delete position, in the view too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.protocol import ProtocolError
from magnetar.protocol.compaction import kept_bits
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.entries import DispatchEntry
    from magnetar.broker.topic_api import CompactedReads
    from magnetar.storage.cursor import ManagedCursor
    from magnetar.storage.entry import Entry
    from magnetar.storage.managed_ledger import ManagedLedger


def read_compacted(
    cursor: ManagedCursor,
    ml: ManagedLedger,
    view: CompactedReads,
    max_entries: int,
    max_bytes: int,
) -> list[Entry] | None:
    """The next entries of the compacted view for this cursor, or None: read the topic instead."""
    horizon = view.horizon
    start = cursor.read_position
    if horizon is None or start > horizon:
        return None  # past the view: where the cursor is (it may have read past the horizon already)
    while start <= horizon:
        read = view.read_compacted(start, max_entries, max_bytes)
        if not read:
            break
        last = read[-1].position
        start = Position(last.ledger_id, last.entry_id + 1)
        cursor.seek_exactly(start)
        entries = [entry for entry in read if not cursor.is_acked(entry.position)]
        if entries:
            return entries
    cursor.seek(ml.next_position(horizon))
    return None


def compacted_ack_sets(
    cursor: ManagedCursor, entries: list[DispatchEntry]
) -> Callable[[Position], list[int] | None]:
    """The MESSAGE ``ack_set`` of each compacted batch: its kept messages (``kept_bits``), less
    those the cursor has acknowledged."""
    kept: dict[Position, list[int] | None] = {}
    for item in entries:
        if item.is_batch:
            try:
                kept[item.position] = kept_bits(item.data)
            except ProtocolError:
                kept[item.position] = None

    def ack_set(position: Position) -> list[int] | None:
        unacked = cursor.batch_ack_set(position)
        bits = kept.get(position)
        if bits is None or unacked is None:
            return bits if unacked is None else unacked
        return [a & b for a, b in zip(bits, unacked, strict=False)]

    return ack_set
