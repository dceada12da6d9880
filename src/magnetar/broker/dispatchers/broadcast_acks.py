"""A broadcast consumer's ACK applied to its virtual cursor and to its messages awaiting ack.

Only the consumer's own state moves here; what follows for the subscription (its cursor after
the slowest consumer, the virtual cursor marked for storage) is the dispatcher's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.dispatchers.virtual_cursor import VirtualCursor
from magnetar.broker.ids import position_of
from magnetar.protocol import wire
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.storage.managed_ledger import ManagedLedger

_CUMULATIVE = wire.CommandAck.Cumulative


def apply(vc: VirtualCursor, pending: dict[Position, int], ack: wire.CommandAck, ml: ManagedLedger) -> bool:
    """Move ``vc`` by the ack's message ids (there is at least one) and drop what they acknowledge
    from ``pending``; False when there was nothing new (a late or repeated cumulative ack, or
    one that names no entry)."""
    ids = ack.message_id
    last = ml.last_confirmed
    if ack.ack_type == _CUMULATIVE:
        msg_id = ids[0]
        position = position_of(msg_id)
        if position <= vc.mark_delete or position > last or position.entry_id < 0:
            return False
        if len(msg_id.ack_set):
            # Everything before this batch, and part of it.
            vc.ack_through(ml.previous_position(position))
            if _ack_batch(vc, msg_id, position):
                vc.ack(position)
            drop_pending_through(pending, vc.mark_delete)
        else:
            vc.ack_through(position)
            drop_pending_through(pending, position)
        return True
    for msg_id in ids:
        position = position_of(msg_id)
        if position > last or position.entry_id < 0:
            continue
        if len(msg_id.ack_set) and not _ack_batch(vc, msg_id, position):
            continue
        vc.ack(position)
        pending.pop(position, None)
    return True


def drop_pending_through(pending: dict[Position, int], position: Position) -> None:
    """A cumulative ack through ``position``: what was sent up to there awaits no ack now."""
    if len(pending) == 1:  # the usual case: the one message sent since the last ack
        if next(iter(pending)) <= position:
            pending.clear()
    elif pending:
        for stale in [p for p in pending if p <= position]:
            del pending[stale]


def _ack_batch(vc: VirtualCursor, msg_id: wire.MessageIdData, position: Position) -> bool:
    size = msg_id.batch_size if msg_id.HasField("batch_size") else 64 * len(msg_id.ack_set)
    return vc.ack_batch_indexes(position, list(msg_id.ack_set), size)
