"""The usual ACK (and MESSAGE) read without protobuf: one message id, no batch bits, nothing else.

A broker with many consumers reads an ACK for nearly every message it sends. Through protobuf
that is a parse, a required-fields check and a dozen attribute reads on the parsed objects,
~2.5 µs in all; most ACKs are the same few bytes, which one regular expression (matched in C)
reads in a quarter of that. Anything else (several ids, an ack set, a request id,
properties, a transaction) does not match, and is parsed in full as before.

    BaseCommand { type = ACK (10); ack (field 10) = CommandAck {
        consumer_id (1); ack_type (2) = Individual | Cumulative;
        message_id (3) = MessageIdData { ledgerId (1); entryId (2) } } }

The same for the usual MESSAGE, which a consumer reads once per message (``read_message``):

    BaseCommand { type = MESSAGE (9); message (field 9) = CommandMessage {
        consumer_id (1); message_id (2) = MessageIdData {
            ledgerId (1); entryId (2); [partition (3), on a partition of a partitioned topic] } } }

Fields in number order, as every protobuf encoder writes them. Ids are the wire's unsigned
64-bit values.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_VARINT = rb"([\x80-\xff]{0,9}[\x00-\x7f])"
_ACK = re.compile(
    rb"\x08\x0a"  # type = ACK
    rb"\x52([\x00-\x7f])"  # ack: field 10, length-delimited, the length in one byte
    rb"\x08" + _VARINT + rb"\x10([\x00\x01])"  # consumer_id, ack_type
    rb"\x1a([\x00-\x7f])"  # message_id: field 3, length-delimited
    rb"\x08" + _VARINT + rb"\x10" + _VARINT,  # ledgerId, entryId
    re.S,
)


_U64 = 1 << 64


#: MessageIdData { ledgerId (1); entryId (2); partition (3), if any }.
_MESSAGE_ID = rb"\x08" + _VARINT + rb"\x10" + _VARINT + rb"(?:\x18" + _VARINT + rb")?"
_MESSAGE = re.compile(
    b"".join(
        (
            rb"\x08\x09",  # type = MESSAGE
            rb"\x4a([\x00-\x7f])",  # message: field 9, length-delimited, the length in one byte
            rb"\x08" + _VARINT,  # consumer_id
            rb"\x12([\x00-\x7f])" + _MESSAGE_ID,  # message_id: field 2
        )
    ),
    re.S,
)


class HotMessage(NamedTuple):
    """A MESSAGE of one entry sent for the first time, read by ``read_message``."""

    consumer_id: int
    ledger_id: int
    entry_id: int
    partition: int  # -1 when the message id has none (a topic that is no partition)
    payload: memoryview


class HotAck(NamedTuple):
    """An ACK of one message id, read by ``read_ack``; ``command`` is the BaseCommand's bytes,
    for whoever needs it parsed in full after all."""

    consumer_id: int
    cumulative: bool
    ledger_id: int
    entry_id: int
    command: bytes


def _varint(data: bytes) -> int:
    if len(data) == 1:
        return data[0]
    value = shift = 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
    return value


def read_ack(frame: bytes, start: int) -> HotAck | None:
    """The ACK whose BaseCommand is ``frame[start:]``, if it is the usual kind; else None."""
    found = _ACK.fullmatch(frame, start)
    if found is None:
        return None
    length, consumer_id, ack_type, id_length, ledger_id, entry_id = found.groups()
    if length[0] != len(frame) - start - 4 or id_length[0] != len(ledger_id) + len(entry_id) + 2:
        return None  # the lengths do not frame the fields: not the usual kind after all
    ids = _varint(consumer_id), _varint(ledger_id), _varint(entry_id)
    if max(ids) >= _U64:
        return None  # not a 64-bit value: the full parser says what is wrong
    return HotAck(ids[0], ack_type == b"\x01", ids[1], ids[2], frame[start:])


def read_message(frame: bytes, start: int, end: int) -> HotMessage | None:
    """The MESSAGE whose BaseCommand is ``frame[start:end]`` (its payload after it), if it is the
    usual kind (no redelivery count, no ack set, no epoch); else None."""
    found = _MESSAGE.fullmatch(frame, start, end)
    if found is None:
        return None
    length, consumer_id, id_length, ledger_id, entry_id, partition = found.groups()
    id_size = len(ledger_id) + len(entry_id) + 2 + (len(partition) + 1 if partition is not None else 0)
    if length[0] != end - start - 4 or id_length[0] != id_size:
        return None
    ids = _varint(consumer_id), _varint(ledger_id), _varint(entry_id)
    if max(ids) >= _U64:
        return None
    index = -1 if partition is None else _int32(_varint(partition))
    if index is None:
        return None  # not an int32 as protobuf writes one: the full parser decides
    return HotMessage(ids[0], ids[1], ids[2], index, memoryview(frame)[end:])


def _int32(value: int) -> int | None:
    """A protobuf int32 from its varint (a negative one is written as ten bytes, as an int64);
    None when the varint is no int32."""
    signed = value - _U64 if value >= 1 << 63 else value
    return signed if value < _U64 and -(1 << 31) <= signed < 1 << 31 else None
