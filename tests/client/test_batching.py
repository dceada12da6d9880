"""Batches built by the accumulator and taken apart by the consumer's decoder, no network."""

from __future__ import annotations

import pytest

from magnetar.client.accumulator import BatchAccumulator, OutgoingMessage
from magnetar.client.acks import ack_set_bits, ack_set_words
from magnetar.client.compression import CompressionType
from magnetar.client.decode import expand, parse_entry, uncompressed_payload
from magnetar.client.message import MessageId
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.entry import prepend_entry_metadata
from magnetar.protocol.headers import encode_headers_and_payload

TOPIC = "persistent://public/default/t"


def build(messages, compression=CompressionType.NONE, **limits):
    acc = BatchAccumulator(**limits)
    for seq, msg in enumerate(messages):
        assert acc.has_room_for(msg)
        acc.add(msg, 100 + seq)
    return acc.build("prod", 1_700_000_000_000, compression)


def receive(built, ack_set=(), broker_meta=None, ledger=4, entry=9):
    raw = encode_headers_and_payload(built.metadata, built.payload)
    if broker_meta is not None:
        raw = prepend_entry_metadata(broker_meta, raw)
    command = wire.CommandMessage(
        consumer_id=1, message_id=wire.MessageIdData(ledger_id=ledger, entry_id=entry)
    )
    command.ack_set.extend(ack_set)
    parsed = parse_entry(command, memoryview(raw), -1, TOPIC)
    return expand(parsed, uncompressed_payload(parsed.metadata, parsed.payload), TOPIC, 1)


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_batch_round_trip_with_every_codec(codec):
    messages = [
        OutgoingMessage(b"first" * 50, properties={"a": "1"}, partition_key="k1", event_timestamp=123),
        OutgoingMessage(b"", ordering_key=b"ok"),
        OutgoingMessage(bytes(range(256)) * 10),
    ]
    built = build(messages, codec)
    assert built.metadata.num_messages_in_batch == 3
    assert built.metadata.sequence_id == 100 and built.metadata.highest_sequence_id == 102
    if codec != CompressionType.NONE:
        assert built.metadata.compression == codec and built.metadata.uncompressed_size > 0
    out = receive(built)
    assert [m.data() for m in out] == [m.payload for m in messages]
    assert out[0].properties() == {"a": "1"} and out[0].partition_key() == "k1"
    assert out[0].event_timestamp() == 123 and out[1].ordering_key() == b"ok"
    assert [m.message_id() for m in out] == [MessageId(-1, 4, 9, i, 3) for i in range(3)]
    assert all(m.publish_timestamp() == 1_700_000_000_000 and m.producer_name() == "prod" for m in out)


def test_batch_is_full_at_max_messages():
    acc = BatchAccumulator(max_messages=3, max_bytes=1 << 20)
    assert [acc.add(OutgoingMessage(b"x"), i) for i in range(3)] == [False, False, True]


def test_batch_is_full_at_max_bytes_and_refuses_what_does_not_fit():
    acc = BatchAccumulator(max_messages=100, max_bytes=10)
    assert acc.add(OutgoingMessage(b"123456"), 0) is False
    assert not acc.has_room_for(OutgoingMessage(b"12345"))
    assert acc.has_room_for(OutgoingMessage(b"1234"))
    assert acc.add(OutgoingMessage(b"1234"), 1) is True


def test_an_empty_batch_takes_even_an_oversized_message():
    acc = BatchAccumulator(max_messages=10, max_bytes=4)
    big = OutgoingMessage(b"x" * 100)
    assert acc.has_room_for(big) and acc.add(big, 0)


def test_build_empties_the_accumulator():
    acc = BatchAccumulator()
    acc.add(OutgoingMessage(b"x"), 0)
    assert acc.build("p", 0, 0) is not None
    assert len(acc) == 0 and acc.size_bytes == 0 and acc.build("p", 0, 0) is None


def test_ack_set_skips_acknowledged_members():
    built = build([OutgoingMessage(bytes([i])) for i in range(5)])
    out = receive(built, ack_set=ack_set_words({1, 3}, 5))
    assert [m.data() for m in out] == [b"\x01", b"\x03"]
    assert [m.message_id().batch_index() for m in out] == [1, 3]


def test_ack_set_words_are_java_bitset_words():
    assert ack_set_words({0, 2}, 3) == [0b101]
    assert ack_set_words({63}, 64) == [-(1 << 63)]
    assert ack_set_words({64, 0}, 65) == [1, 1]
    assert ack_set_bits(ack_set_words({0, 5, 63, 64, 127}, 128)) == {0, 5, 63, 64, 127}
    assert ack_set_bits([]) is None


def test_broker_entry_index_of_each_batch_member():
    built = build([OutgoingMessage(b"a"), OutgoingMessage(b"b"), OutgoingMessage(b"c")])
    out = receive(built, broker_meta=wire.BrokerEntryMetadata(index=41, broker_timestamp=777))
    assert [m.index() for m in out] == [39, 40, 41]
    assert all(m.broker_publish_time() == 777 for m in out)


def test_without_broker_entry_metadata_index_is_none():
    out = receive(build([OutgoingMessage(b"a")]))
    assert out[0].index() is None and out[0].broker_publish_time() is None


def test_single_message_with_broker_entry_metadata():
    meta = wire.MessageMetadata(producer_name="p", sequence_id=1, publish_time=5)
    meta.properties.add(key="k", value="v")
    raw = prepend_entry_metadata(wire.BrokerEntryMetadata(index=7), encode_headers_and_payload(meta, b"body"))
    command = wire.CommandMessage(
        consumer_id=1, message_id=wire.MessageIdData(ledger_id=1, entry_id=2), redelivery_count=3
    )
    parsed = parse_entry(command, memoryview(raw), 2, TOPIC)
    (msg,) = expand(parsed, bytes(parsed.payload), TOPIC, 1)
    assert msg.data() == b"body" and msg.index() == 7 and msg.redelivery_count() == 3
    assert msg.properties() == {"k": "v"} and msg.message_id() == MessageId(2, 1, 2)
    assert msg.topic_name() == TOPIC
