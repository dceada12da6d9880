"""Chunked messages for MQTT, without a network: an MQTT message cut as Pulsar's producer cuts it
(large_messages.split), and chunks put back together for MQTT subscribers (chunks.py): in order,
across interleaved producers, and dropped (acknowledged) when they can never make a message."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from magnetar.broker.entries import DispatchEntry
from magnetar.broker.mqtt import chunks
from magnetar.broker.mqtt.chunks import ChunkedMessages
from magnetar.broker.mqtt.large_messages import ChunkTooSmall, split
from magnetar.broker.mqtt.messages import from_entry
from magnetar.protocol import wire
from magnetar.protocol.compression import compress
from magnetar.protocol.headers import metadata_span, parse_metadata
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.position import Position

CAM = TopicName.parse("persistent://public/default/cam")


@dataclass
class _Topic:
    name: TopicName = CAM


@dataclass
class _Subscription:
    topic: _Topic = field(default_factory=_Topic)


@dataclass
class FakeConsumer:
    consumer_id: int
    name: str = "client"
    closed: bool = False
    subscription: _Subscription = field(default_factory=_Subscription)


def metadata(producer: str = "mqtt-cam", sequence_id: int = 7) -> wire.MessageMetadata:
    meta = wire.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=1)
    meta.properties.add(key="format", value="jpeg")
    return meta


def entries_of(meta: wire.MessageMetadata, payload: bytes, max_size: int, ledger: int = 1, start: int = 0):
    """The chunks of a message as a subscription hands them out: one entry each."""
    out = []
    for i, (chunk, data) in enumerate(split(meta, payload, max_size)):
        out.append(DispatchEntry(Position(ledger, start + i), data, 0, 1, chunk))
    return out


def test_split_cuts_within_max_message_size_as_pulsars_producer_names_chunks():
    payload = os.urandom(10_000)
    parts = split(metadata(), payload, 3000)
    assert len(parts) == 4
    joined = b""
    for chunk_id, (meta, data) in enumerate(parts):
        assert (meta.uuid, meta.chunk_id, meta.num_chunks_from_msg) == ("mqtt-cam-7", chunk_id, 4)
        assert meta.total_chunk_msg_size == len(payload) and meta.sequence_id == 7
        assert [(p.key, p.value) for p in meta.properties] == [("format", "jpeg")]
        stored, body = parse_metadata(data)
        assert stored == meta
        assert len(data) - metadata_span(data)[0] <= 3000  # metadata and part, as Pulsar counts
        joined += bytes(body)
    assert joined == payload
    with pytest.raises(ChunkTooSmall):
        split(metadata(), payload, 40)


def test_chunks_are_put_together_and_acknowledged_together():
    dropped: list[Position] = []
    held = ChunkedMessages(lambda consumer, position: dropped.append(position), 1 << 20)
    consumer = FakeConsumer(1)
    payload = os.urandom(5000)
    parts = entries_of(metadata(), payload, 2000)
    assert [held.take(consumer, entry) for entry in parts[:-1]] == [None, None]
    whole = held.take(consumer, parts[-1])
    assert whole is not None and whole.position == parts[-1].position and whole.num_messages == 3
    assert from_entry(whole)[0].payload == payload
    assert from_entry(whole)[0].properties == (("format", "jpeg"),)
    assert held.positions(consumer, whole.position) == [p.position for p in parts]
    assert held.positions(consumer, whole.position) == [whole.position]  # asked once
    assert dropped == [] and held.pending == 0


def test_a_compressed_message_is_decompressed_whole():
    payload = bytes(50_000) + os.urandom(100)
    meta = metadata()
    meta.compression = wire.LZ4
    meta.uncompressed_size = len(payload)
    compressed = compress(wire.LZ4, payload)
    held = ChunkedMessages(lambda consumer, position: None, 1 << 20)
    consumer = FakeConsumer(2)
    parts = entries_of(meta, bytes(compressed), 300)
    results = [held.take(consumer, entry) for entry in parts]
    assert results[:-1] == [None] * (len(parts) - 1)
    assert from_entry(results[-1])[0].payload == payload


def test_interleaved_producers_each_complete():
    held = ChunkedMessages(lambda consumer, position: None, 1 << 20)
    consumer = FakeConsumer(3)
    a = entries_of(metadata("p-a", 1), b"a" * 3000, 1200, ledger=1)
    b = entries_of(metadata("p-b", 1), b"b" * 3000, 1200, ledger=2)
    done = [held.take(consumer, entry) for pair in zip(a, b, strict=True) for entry in pair]
    wholes = [d for d in done if d is not None]
    assert sorted(from_entry(w)[0].payload for w in wholes) == [b"a" * 3000, b"b" * 3000]


def test_chunks_that_cannot_make_a_message_are_dropped_and_acknowledged():
    dropped: list[Position] = []
    held = ChunkedMessages(lambda consumer, position: dropped.append(position), 1 << 20)
    consumer = FakeConsumer(4)
    parts = entries_of(metadata(), os.urandom(5000), 2000)
    # a chunk of no message begun
    assert held.take(consumer, parts[1]) is None
    assert dropped == [parts[1].position]
    # a gap: chunk 0, then chunk 2: both go
    dropped.clear()
    held.take(consumer, parts[0])
    assert held.take(consumer, parts[2]) is None
    assert dropped == [parts[0].position, parts[2].position] and held.pending == 0
    # chunk 0 again (the producer began the message again): the old part goes, the new goes on
    dropped.clear()
    held.take(consumer, parts[0])
    again = entries_of(metadata(), os.urandom(5000), 2000, ledger=9)
    held.take(consumer, again[0])
    assert dropped == [parts[0].position]
    assert held.take(consumer, again[1]) is None and held.take(consumer, again[2]) is not None


def test_a_message_over_the_limit_and_too_many_incomplete_ones_are_dropped(monkeypatch):
    dropped: list[Position] = []
    held = ChunkedMessages(lambda consumer, position: dropped.append(position), 4000)
    consumer = FakeConsumer(5)
    over = entries_of(metadata(), os.urandom(5000), 2000)
    assert held.take(consumer, over[0]) is None and dropped == [over[0].position]
    dropped.clear()
    firsts = [entries_of(metadata(f"p{i}"), b"x" * 3000, 2000, ledger=10 + i)[0] for i in range(17)]
    for entry in firsts:
        held.take(consumer, entry)
    assert dropped == [firsts[0].position] and held.pending == chunks.MAX_PENDING
    # and an incomplete message that waits too long
    now = [1000.0]
    monkeypatch.setattr(chunks.time, "monotonic", lambda: now[0])
    lone = entries_of(metadata("late"), b"y" * 3000, 2000, ledger=99)
    held.take(consumer, lone[0])
    now[0] += chunks.EXPIRE_S + 1
    dropped.clear()
    assert held.take(consumer, lone[1]) is None
    assert lone[0].position in dropped and lone[1].position in dropped
