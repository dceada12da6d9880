"""Readers with the official client: start positions, inclusiveness, has_message_available."""

from __future__ import annotations

import pulsar
import pytest

from .support import assert_next_read_is_marker, msg_id_tuple, read_stored

pytestmark = pytest.mark.interop


@pytest.fixture
def five(client, topic):
    """Five plain messages m0..m4 on the topic; their message ids."""
    producer = client.create_producer(topic)
    return [producer.send(f"m{i}".encode()) for i in range(5)]


def datas(messages) -> list[bytes]:
    return [m.data() for m in messages]


def test_reader_from_earliest_reads_everything(client, topic, five):
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.has_message_available()
    messages = [reader.read_next(5000) for _ in range(5)]
    assert datas(messages) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert [msg_id_tuple(m.message_id()) for m in messages] == [msg_id_tuple(i) for i in five]
    assert not reader.has_message_available()
    assert_next_read_is_marker(reader, client.create_producer(topic))  # and nothing of the five again


def test_reader_from_latest_reads_only_new_messages(client, topic, five):
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    assert not reader.has_message_available()
    client.create_producer(topic).send(b"new")
    assert reader.read_next(5000).data() == b"new", "the next: none of the five comes before it"
    assert not reader.has_message_available()


def test_reader_from_latest_inclusive_reads_the_last_message(client, topic, five):
    reader = client.create_reader(topic, pulsar.MessageId.latest, start_message_id_inclusive=True)
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"m4"
    assert not reader.has_message_available()


@pytest.mark.parametrize(
    ("inclusive", "expected"),
    [(False, [b"m3", b"m4"]), (True, [b"m2", b"m3", b"m4"])],
    ids=["exclusive", "inclusive"],
)
def test_reader_from_a_message_id(client, topic, five, inclusive, expected):
    reader = client.create_reader(topic, five[2], start_message_id_inclusive=inclusive)
    assert reader.has_message_available()
    assert datas(read_stored(reader)) == expected
    assert not reader.has_message_available()
    assert_next_read_is_marker(reader, client.create_producer(topic))


def test_reader_from_a_deserialized_message_id(client, topic, five):
    start = pulsar.MessageId.deserialize(five[3].serialize())
    reader = client.create_reader(topic, start)
    assert datas(read_stored(reader)) == [b"m4"]
    assert_next_read_is_marker(reader, client.create_producer(topic))


@pytest.mark.parametrize(
    ("inclusive", "expected"),
    [(False, [b"b3", b"b4", b"b5", b"after"]), (True, [b"b2", b"b3", b"b4", b"b5", b"after"])],
    ids=["exclusive", "inclusive"],
)
def test_reader_from_a_message_inside_a_batch(client, topic, inclusive, expected):
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=6, batching_max_publish_delay_ms=10_000
    )
    receipts = {}
    for i in range(6):
        producer.send_async(f"b{i}".encode(), lambda res, msg_id, i=i: receipts.__setitem__(i, msg_id))
    producer.flush()
    client.create_producer(topic).send(b"after")
    assert receipts[2].batch_index() == 2
    reader = client.create_reader(topic, receipts[2], start_message_id_inclusive=inclusive)
    assert datas(read_stored(reader)) == expected
    assert_next_read_is_marker(reader, client.create_producer(topic))


def test_reader_on_an_empty_topic(client, topic):
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    client.create_producer(topic).send(b"first")
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"first"


def test_readers_do_not_disturb_a_durable_subscription(client, topic, five):
    consumer = client.subscribe(topic, "durable", initial_position=pulsar.InitialPosition.Earliest)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert len(read_stored(reader)) == 5
    reader.close()
    assert [consumer.receive(5000).data() for _ in range(5)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
