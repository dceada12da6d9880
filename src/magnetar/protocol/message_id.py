"""Message ids as they travel, for the broker, the admin API and the client alike.

* On the wire (``MessageIdData``) ledger and entry ids are uint64 but mean signed values:
  earliest is (-1, -1), sent as 2**64 - 1, and latest is (INT64_MAX, INT64_MAX).
* Serialized, a message id is its ``MessageIdData`` (what the official clients'
  ``MessageId.serialize`` writes).
* In the admin API's index look-ups it is JSON: ``ledgerId``, ``entryId``, ``batchIndex`` and
  ``partition`` (-1 when not a batch, or not a partition).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import parse_proto

_U64 = 1 << 64
INT64_MAX = (1 << 63) - 1


def to_signed(value: int) -> int:
    """A uint64 of the wire as the int64 it means (2**64 - 1 is -1)."""
    return value - _U64 if value > INT64_MAX else value


def to_u64(value: int) -> int:
    """An int64 as the wire's uint64 (-1 is 2**64 - 1)."""
    return value % _U64


def parse_message_id(data: bytes | memoryview) -> wire.MessageIdData:
    """A serialized message id; ProtocolError when the bytes are not one."""
    return parse_proto(wire.MessageIdData(), data, "message id")


def message_id_json(
    ledger_id: int, entry_id: int, batch_index: int = -1, partition: int = -1
) -> dict[str, int]:
    """The JSON form of a message id in the index look-ups."""
    return {"ledgerId": ledger_id, "entryId": entry_id, "batchIndex": batch_index, "partition": partition}


def message_id_fields(body: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """``(ledger, entry, batch index, partition)`` of the JSON form (the last two may be missing:
    -1); KeyError or ValueError when the ids are not there or not numbers."""
    return (
        int(body["ledgerId"]),
        int(body["entryId"]),
        int(body.get("batchIndex", -1)),
        int(body.get("partition", -1)),
    )
