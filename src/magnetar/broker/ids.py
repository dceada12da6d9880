"""Conversions between storage positions and wire message ids.

Pulsar's wire uses uint64 for ledger and entry ids but means signed values:
earliest is (-1, -1), sent as 2**64 - 1, and latest is (INT64_MAX, INT64_MAX).
"""

from __future__ import annotations

from magnetar.protocol import wire
from magnetar.storage.position import Position

_U64 = 1 << 64
INT64_MAX = (1 << 63) - 1


def to_signed(value: int) -> int:
    return value - _U64 if value >= 1 << 63 else value


def to_u64(value: int) -> int:
    return value % _U64


def position_of(msg_id: wire.MessageIdData) -> Position:
    return Position(to_signed(msg_id.ledger_id), to_signed(msg_id.entry_id))


def is_earliest(msg_id: wire.MessageIdData) -> bool:
    return to_signed(msg_id.ledger_id) < 0 and to_signed(msg_id.entry_id) < 0


def is_latest(msg_id: wire.MessageIdData) -> bool:
    return msg_id.ledger_id == INT64_MAX and msg_id.entry_id == INT64_MAX


def message_id_data(position: Position, batch_index: int = -1, partition: int = -1) -> wire.MessageIdData:
    msg_id = wire.MessageIdData(ledger_id=to_u64(position.ledger_id), entry_id=to_u64(position.entry_id))
    if batch_index >= 0:
        msg_id.batch_index = batch_index
    if partition >= 0:
        msg_id.partition = partition
    return msg_id
