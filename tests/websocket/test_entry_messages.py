"""From a delivered entry to the WebSocket consumer's messages, without a network: single messages,
batches (ids with batch index and size, members an ack set acknowledged left out), compression,
chunked messages put together, and entries that do not decode."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.compression import CompressionType, compress
from magnetar.protocol.headers import encode_headers_and_payload
from magnetar.websocket.entry_messages import MAX_PENDING_CHUNKED, ChunkAssembly, parse_entry, unacked_indexes


def entry(metadata: wire.MessageMetadata, payload: bytes) -> memoryview:
    return memoryview(encode_headers_and_payload(metadata, payload))


def meta(**fields) -> wire.MessageMetadata:
    return wire.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1000, **fields)


def test_single_message():
    metadata = meta(partition_key="k", event_time=5)
    metadata.properties.add(key="a", value="1")
    parsed = parse_entry(3, 4, 2, entry(metadata, b"hello"), 1, [])
    (message,) = parsed.messages
    assert (message.payload, message.key, message.properties, message.event_time) == (
        b"hello",
        "k",
        {"a": "1"},
        5,
    )
    assert message.message_id == wire.MessageIdData(ledger_id=3, entry_id=4, partition=2)
    assert (message.publish_time, message.redelivery_count, parsed.batch_size) == (1000, 1, 0)


def batch(count: int, compression: CompressionType = CompressionType.NONE) -> memoryview:
    members = []
    for i in range(count):
        single = wire.SingleMessageMetadata(partition_key=f"k{i}")
        single.properties.add(key="i", value=str(i))
        members.append((single, f"m{i}".encode()))
    body = encode_batch(members)
    metadata = meta(num_messages_in_batch=count)
    if compression is not CompressionType.NONE:
        metadata.compression = int(compression)
        metadata.uncompressed_size = len(body)
        body = compress(compression, body)
    return entry(metadata, body)


@pytest.mark.parametrize("compression", list(CompressionType))
def test_batch_members_carry_batch_index_and_size(compression):
    parsed = parse_entry(1, 2, -1, batch(3, compression), 0, [])
    assert [m.payload for m in parsed.messages] == [b"m0", b"m1", b"m2"]
    assert [(m.message_id.batch_index, m.message_id.batch_size) for m in parsed.messages] == [
        (0, 3),
        (1, 3),
        (2, 3),
    ]
    assert [m.key for m in parsed.messages] == ["k0", "k1", "k2"]
    assert not parsed.messages[0].message_id.HasField("partition")
    assert parsed.batch_size == 3


def test_ack_set_leaves_out_acknowledged_members():
    assert unacked_indexes([]) is None
    assert unacked_indexes([0b101]) == {0, 2}
    parsed = parse_entry(1, 2, -1, batch(3), 0, [0b101])
    assert [m.payload for m in parsed.messages] == [b"m0", b"m2"]


def chunk(uuid: str, chunk_id: int, count: int, part: bytes, total: int) -> memoryview:
    metadata = meta(uuid=uuid, chunk_id=chunk_id, num_chunks_from_msg=count, total_chunk_msg_size=total)
    return entry(metadata, part)


def test_chunks_make_one_message_with_the_first_chunk_in_its_id():
    assembly = ChunkAssembly()
    parts = [b"aa", b"bb", b"c"]
    results = []
    for i, part in enumerate(parts):
        parsed = parse_entry(7, 10 + i, 1, chunk("u1", i, 3, part, 5), 0, [])
        assert parsed.messages == [] and parsed.chunk is not None
        results.append(assembly.add(parsed, 1, 0))
    assert results[:2] == [None, None]
    message, positions = results[2]
    assert message.payload == b"aabbc"
    assert positions == [(7, 10), (7, 11), (7, 12)]
    assert (message.message_id.entry_id, message.message_id.first_chunk_message_id.entry_id) == (12, 10)
    assert message.message_id.partition == 1


def test_a_chunk_out_of_order_drops_its_message():
    assembly = ChunkAssembly()
    assert assembly.add(parse_entry(1, 1, -1, chunk("u", 0, 3, b"a", 3), 0, []), -1, 0) is None
    assert assembly.add(parse_entry(1, 2, -1, chunk("u", 2, 3, b"c", 3), 0, []), -1, 0) is None
    assert assembly.add(parse_entry(1, 3, -1, chunk("u", 1, 3, b"b", 3), 0, []), -1, 0) is None


def test_incomplete_chunked_messages_are_bounded():
    assembly = ChunkAssembly()
    for n in range(MAX_PENDING_CHUNKED + 5):
        assembly.add(parse_entry(1, n, -1, chunk(f"u{n}", 0, 2, b"a", 2), 0, []), -1, 0)
    assert len(assembly._pending) == MAX_PENDING_CHUNKED


def test_corrupt_entries_are_protocol_errors():
    good = bytearray(entry(meta(), b"payload"))
    good[-1] ^= 1  # the checksum no longer matches
    with pytest.raises(ProtocolError):
        parse_entry(1, 1, -1, memoryview(bytes(good)), 0, [])
    lying = entry(meta(num_messages_in_batch=5), b"\x00\x00\x00\x01x")
    with pytest.raises(ProtocolError):
        parse_entry(1, 1, -1, lying, 0, [])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=2))
def test_fuzzed_entries_decode_or_are_protocol_errors(data, ack_set):
    with contextlib.suppress(ProtocolError):
        parse_entry(1, 1, -1, memoryview(data), 0, ack_set)
