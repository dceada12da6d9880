"""Batches: one entry whose (uncompressed) payload is many ``[size u32][SingleMessageMetadata][payload]``.

The broker stores a batch as one entry and never looks inside it again, but every consumer
does: a batch whose count or sizes lie makes the official C++ client read past its buffer
and crash. ``check_message`` is the broker's look inside, once, when the batch is sent.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from google.protobuf.message import DecodeError

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.compression import decompress
from magnetar.protocol.errors import ProtocolError, parse_proto
from magnetar.varint import read as read_varint

_U32 = struct.Struct(">I")


#: What ``_members`` makes of each message's metadata, one per reader built on it.
_FRESH, _PROPERTIES, _REUSED, _CHECK = range(4)


def _members(payload: bytes | memoryview, count: int, how: int, error: type[ProtocolError]) -> Iterator[Any]:
    """The one walk over a batch's ``[size u32][SingleMessageMetadata][payload]`` framing, under
    every reader here: each message's metadata and payload are checked against what is left of
    the batch, and a batch that does not add up is refused with ``error`` in the same words
    whichever reader walks it. ``how`` says what is made of each metadata (the readers above say
    what they yield); it is a branch in this loop, not a function called per message, as a call
    per message would cost the fast readers (the broker's check of every batch, the bulk reader,
    MQTT's) 5-15% of their time:

    - ``_FRESH``: a new metadata object, fully checked (``parse_proto``);
    - ``_REUSED`` and ``_CHECK``: one object parsed into again, ``payload_size`` checked;
    - ``_PROPERTIES``: ``_split_single`` where it can, else as ``_FRESH``.

    ``_CHECK`` yields one number once every message is walked: where the last one ends.
    """
    view = memoryview(payload)
    end_of_batch = len(view)
    single: wire.SingleMessageMetadata | None = None
    if how >= _REUSED:  # one object for all (a new one for a batch of one costs as much as its parse)
        reused = single = wire.SingleMessageMetadata()
        parse, has = reused.ParseFromString, reused.HasField
    key = b""
    pos = 0
    for _ in range(count):
        if pos + 4 > end_of_batch:
            raise error("batch ends before its declared message count")
        (size,) = _U32.unpack_from(view, pos)
        start = pos + 4
        pos = start + size
        if pos > end_of_batch:
            raise error("single message metadata runs past the end of the batch")
        if how >= _REUSED:
            try:
                parse(view[start:pos])  # type: ignore[arg-type]  # upb parses any buffer (stub: bytes)
            except (DecodeError, ValueError, RuntimeError) as exc:
                raise error(f"malformed single message metadata: {exc}") from None
            if not has("payload_size"):
                raise error("single message metadata is missing required fields: payload_size")
            payload_size = reused.payload_size
        elif how == _FRESH:
            single = parse_proto(wire.SingleMessageMetadata(), view[start:pos], "single message metadata")
            payload_size = single.payload_size
        else:
            raw = bytes(view[start:pos])
            split = _split_single(raw)
            if split is None:
                single = parse_proto(wire.SingleMessageMetadata(), raw, "single message metadata")
                key, payload_size = b"", single.payload_size
            else:
                single = None
                key, payload_size = split
        start = pos
        pos += payload_size
        if payload_size < 0 or pos > end_of_batch:
            raise error("message payload runs past the end of the batch")
        if how != _CHECK:
            yield (key, single, view[start:pos]) if how == _PROPERTIES else (single, view[start:pos])
    if how == _CHECK:
        yield pos


def iter_batch(
    payload: bytes | memoryview, count: int
) -> Iterator[tuple[wire.SingleMessageMetadata, memoryview]]:
    """Yield (single-message metadata, payload) for each of ``count`` messages of a batch."""
    return _members(payload, count, _FRESH, ProtocolError)


def iter_batch_reused(
    payload: bytes | memoryview, count: int
) -> Iterator[tuple[wire.SingleMessageMetadata, memoryview]]:
    """As ``iter_batch``, with one metadata object parsed into again for every message: read
    what you need of it before the next. A new object per message and its full initialization
    check were most of a bulk reader's cost per message (1.1 against 0.4 us)."""
    return _members(payload, count, _REUSED, ProtocolError)


class InvalidMessage(ProtocolError):
    """A message whose structure is wrong (a batch that does not add up, say).

    Like a checksum mismatch it is local to one message: the framing is intact, so the
    connection carries on after the message is refused.
    """


def check_message(
    metadata: wire.MessageMetadata, payload: bytes | memoryview, max_messages: int, max_size: int
) -> None:
    """Raise InvalidMessage unless a consumer can take ``payload`` apart as ``metadata`` says.

    A batch (``num_messages_in_batch`` set) holds 1 to ``max_messages`` messages, is no chunk,
    and its (decompressed) payload is exactly its messages: each single-message metadata parses
    and the sizes add up to the last byte. A compressed message that is no chunk announces an
    ``uncompressed_size`` of at most ``max_size``, as consumers discard larger ones; a compressed
    batch is decompressed to be checked (bounded by that size). Other messages pass untouched.
    """
    compressed = metadata.compression != wire.NONE
    chunk = metadata.num_chunks_from_msg > 1
    if compressed and not chunk and metadata.uncompressed_size > max_size:
        raise InvalidMessage(
            f"uncompressed size {metadata.uncompressed_size} exceeds the maximum message size {max_size}"
        )
    if not metadata.HasField("num_messages_in_batch"):
        return
    count = metadata.num_messages_in_batch
    if chunk:
        raise InvalidMessage("a chunk of a chunked message cannot be a batch")
    if not 1 <= count <= max_messages:
        raise InvalidMessage(f"a batch holds 1 to {max_messages} messages, this one says {count}")
    if compressed:
        try:
            payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
        except ProtocolError as exc:
            raise InvalidMessage(str(exc)) from None
    (end,) = _members(payload, count, _CHECK, InvalidMessage)  # where the messages end
    if end != len(payload):
        raise InvalidMessage(f"batch of {count} messages ends at byte {end} of its {len(payload)}")


def encode_batch(messages: list[tuple[wire.SingleMessageMetadata, bytes]]) -> bytes:
    parts: list[bytes] = []
    for single, payload in messages:
        single.payload_size = len(payload)
        raw = single.SerializeToString()
        parts += (_U32.pack(len(raw)), raw, payload)
    return b"".join(parts)


def iter_batch_properties(
    payload: bytes | memoryview, count: int
) -> Iterator[tuple[bytes, wire.SingleMessageMetadata | None, memoryview]]:
    """As ``iter_batch``, for a reader that wants only each message's properties and payload:
    yields (properties' bytes, None, payload) for a message whose metadata holds nothing but
    properties, ``payload_size`` and ``sequence_id``, written in field order (as protobuf writes
    them, so as every producer does that sets no other field): the caller reads the properties
    from their bytes, the same in most messages of a batch, once (``properties_of``); any other
    metadata is parsed whole and yielded as (b"", metadata, payload). Parsing every message's
    metadata into a protobuf object, and its properties into objects, was most of the cost
    per message of taking a batch apart for MQTT subscribers."""
    return _members(payload, count, _PROPERTIES, ProtocolError)


#: Field tags (number << 3 | wire type) of SingleMessageMetadata: properties (1, length
#: delimited), payload_size (3, varint), sequence_id (8, varint).
_PROPERTIES_TAG, _PAYLOAD_SIZE_TAG, _SEQUENCE_ID_TAG = 0x0A, 0x18, 0x40
_INT32_MAX = 0x7FFF_FFFF


def _split_single(raw: bytes) -> tuple[bytes, int] | None:
    """The bytes of the properties and the payload size of a metadata of properties,
    payload_size and an optional sequence_id, in this order and each once; None for any other
    (parsed whole, by protobuf, which says what is wrong with a varint that does not read)."""
    size = len(raw)
    pos = 0
    try:
        while pos < size and raw[pos] == _PROPERTIES_TAG:
            length, pos = read_varint(raw, pos + 1, size)
            pos += length
        if pos >= size or raw[pos] != _PAYLOAD_SIZE_TAG:
            return None
        properties_end = pos
        payload_size, pos = read_varint(raw, pos + 1, size)
        if payload_size > _INT32_MAX:
            return None  # a negative int32 (ten bytes): protobuf says what is wrong
        if pos < size:
            if raw[pos] != _SEQUENCE_ID_TAG:
                return None
            _, pos = read_varint(raw, pos + 1, size)
            if pos != size:
                return None
    except ValueError:
        return None
    return raw[:properties_end], payload_size


def properties_of(key: bytes) -> list[tuple[str, str]]:
    """The properties whose bytes ``iter_batch_properties`` yielded, as (key, value) pairs;
    ProtocolError when they do not parse."""
    single = parse_proto(wire.SingleMessageMetadata(), key + b"\x18\x00", "single message metadata")
    return [(kv.key, kv.value) for kv in single.properties]
