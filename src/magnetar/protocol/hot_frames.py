"""Hand-encoded frames for the commands sent once per message: MESSAGE, SEND_RECEIPT and ACK.

Building them through protobuf objects costs several microseconds each; writing the few
varints directly costs a third of that. The bytes are exactly what protobuf would produce
(fields in number order, proto2 repeated scalars unpacked) — a test checks them against it.
Ledger and entry ids are taken as the unsigned 64-bit values of the wire.

A MESSAGE for a partition of a partitioned topic carries the partition index in its message id,
as Pulsar's broker writes it (``partition_field``); the official clients compare it with the
partition of GET_LAST_MESSAGE_ID's answer (a reader's ``hasMessageAvailable``). For any other
topic it is left out (-1, protobuf's default), so those frames stay as they were.
"""

from __future__ import annotations

import struct

from magnetar.varint import encode as varint

_HEADER = struct.Struct(">II")
_U64 = 1 << 64

#: BaseCommand.type = MESSAGE (9), then the tag of field 9 (length-delimited).
_MESSAGE_PREFIX = b"\x08\x09\x4a"
#: BaseCommand.type = SEND_RECEIPT (7), then the tag of field 7.
_RECEIPT_PREFIX = b"\x08\x07\x3a"
#: BaseCommand.type = ACK (10), then the tag of field 10.
_ACK_PREFIX = b"\x08\x0a\x52"
#: CommandAck.ack_type (field 2) Individual and Cumulative.
_ACK_TYPES = (b"\x10\x00", b"\x10\x01")

_SMALL = [bytes([n]) for n in range(128)]  # a one-byte length, no call


def _message_id(ledger_id: int, entry_id: int, partition: bytes = b"") -> bytes:
    return b"".join((b"\x08", varint(ledger_id), b"\x10", varint(entry_id), partition))


def partition_field(partition_index: int) -> bytes:
    """``MessageIdData.partition`` encoded (field 3) for a topic's MESSAGEs: the same in all of
    them, so worked out once per consumer or dispatcher; empty when the topic is no partition."""
    return b"" if partition_index < 0 else b"\x18" + varint(partition_index)


def message_header(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    redelivery_count: int,
    ack_set: list[int] | None,
    payload_size: int,
    partition: bytes = b"",
) -> bytes:
    """Everything of a MESSAGE frame before the payload (write the payload right after);
    ``partition`` is the topic's ``partition_field``."""
    msg_id = _message_id(ledger_id, entry_id, partition)
    parts = [b"\x08", varint(consumer_id), b"\x12", varint(len(msg_id)), msg_id]
    if redelivery_count:
        parts += (b"\x18", varint(redelivery_count))
    if ack_set:
        for word in ack_set:
            parts += (b"\x20", varint(word % _U64))
    body = b"".join(parts)
    cmd = b"".join((_MESSAGE_PREFIX, varint(len(body)), body))
    return _HEADER.pack(len(cmd) + 4 + payload_size, len(cmd)) + cmd


def consumer_id_field(consumer_id: int) -> bytes:
    """``CommandMessage.consumer_id`` encoded (field 1): the same in every MESSAGE to a consumer."""
    return b"\x08" + varint(consumer_id)


def message_id_field(ledger_id: int, entry_id: int, partition: bytes = b"") -> bytes:
    """``CommandMessage.message_id`` encoded (field 2): the same in every consumer's MESSAGE of
    one entry (``partition``: the topic's ``partition_field``)."""
    msg_id = _message_id(ledger_id, entry_id, partition)
    return b"\x12" + varint(len(msg_id)) + msg_id


def plain_message_header(id_field: bytes, message_id: bytes, payload_size: int) -> bytes:
    """``message_header`` from the two fields above, for a MESSAGE with no redelivery count and
    no ack set (the usual one): two fields make at most 41 bytes (a partition index takes up to
    6 of them), so the command's length is one byte."""
    body = len(id_field) + len(message_id)
    cmd = body + 4
    return _HEADER.pack(cmd + 4 + payload_size, cmd) + _MESSAGE_PREFIX + _SMALL[body] + id_field + message_id


def send_receipt_frame(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int = 0
) -> bytes:
    msg_id = _message_id(ledger_id, entry_id)
    parts = [b"\x08", varint(producer_id), b"\x10", varint(sequence_id), b"\x1a", varint(len(msg_id)), msg_id]
    if highest_sequence_id:
        parts += (b"\x20", varint(highest_sequence_id))
    body = b"".join(parts)
    cmd = b"".join((_RECEIPT_PREFIX, varint(len(body)), body))
    return _HEADER.pack(len(cmd) + 4, len(cmd)) + cmd


def ack_frame(consumer_id: int, cumulative: bool, ledger_id: int, entry_id: int) -> bytes:
    """An ACK of one message id (no batch bits, no request id): what ``hot_acks.read_ack`` reads."""
    msg_id = _message_id(ledger_id, entry_id)
    body = b"".join(
        (b"\x08", varint(consumer_id), _ACK_TYPES[cumulative], b"\x1a", varint(len(msg_id)), msg_id)
    )
    cmd = b"".join((_ACK_PREFIX, varint(len(body)), body))
    return _HEADER.pack(len(cmd) + 4, len(cmd)) + cmd
