"""Conversions between storage positions and wire message ids (the signed and unsigned
forms of ledger and entry ids: ``protocol/message_id.py``)."""

from __future__ import annotations

from magnetar.protocol import wire
from magnetar.protocol.message_id import INT64_MAX, to_signed
from magnetar.storage.position import Position


def position_of(msg_id: wire.MessageIdData) -> Position:
    return Position(to_signed(msg_id.ledger_id), to_signed(msg_id.entry_id))


def is_earliest(msg_id: wire.MessageIdData) -> bool:
    return to_signed(msg_id.ledger_id) < 0 and to_signed(msg_id.entry_id) < 0


def is_latest(msg_id: wire.MessageIdData) -> bool:
    return msg_id.ledger_id == INT64_MAX and msg_id.entry_id == INT64_MAX
