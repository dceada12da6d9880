"""Producing and consuming with the official client: message fields, batches, positions, lifecycle."""

from __future__ import annotations

import time

import pulsar
import pytest
from pulsar.exceptions import Timeout

from .support import admin_call, assert_next_is_marker, ids, msg_id_tuple, receive_n

pytestmark = pytest.mark.interop

EVENT_TIME = 1_700_000_000_123


@pytest.mark.parametrize("batching", [False, True], ids=["plain", "batched"])
def test_properties_key_and_event_time_round_trip(client, topic, batching):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, producer_name="round-trip", batching_enabled=batching)
    before_ms = int(time.time() * 1000)
    results = []
    for i in range(3):
        producer.send_async(
            f"payload-{i}".encode(),
            lambda res, _id: results.append(res),
            properties={"colour": "blue", "index": str(i), "ünï": "cödé"},
            partition_key=f"key-{i}",
            ordering_key=f"order-{i}",
            event_timestamp=EVENT_TIME + i,
        )
    producer.flush()
    assert results == [pulsar.Result.Ok] * 3
    messages = receive_n(consumer, 3)
    for i, msg in enumerate(messages):
        assert msg.data() == f"payload-{i}".encode()
        assert msg.properties() == {"colour": "blue", "index": str(i), "ünï": "cödé"}
        assert msg.partition_key() == f"key-{i}"
        assert msg.ordering_key() == f"order-{i}"
        assert msg.event_timestamp() == EVENT_TIME + i
        assert before_ms - 5000 <= msg.publish_timestamp() <= int(time.time() * 1000) + 5000
        assert msg.producer_name() == "round-trip"
        assert msg.redelivery_count() == 0
        assert msg.topic_name() == topic
    if batching:
        assert [m.message_id().batch_index() for m in messages] == [0, 1, 2]
    assert_next_is_marker(consumer, producer)


def test_message_without_properties_or_key(client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    msg_id = producer.send(b"")
    msg = consumer.receive(5000)
    assert msg.data() == b""
    assert msg.properties() == {}
    assert msg.partition_key() == ""
    assert msg.event_timestamp() == 0
    assert msg_id_tuple(msg.message_id()) == msg_id_tuple(msg_id)


def test_send_receipt_ids_match_received_ids(client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    sent = [producer.send(f"m{i}".encode()) for i in range(5)]
    received = receive_n(consumer, 5)
    assert ids(received) == [msg_id_tuple(m) for m in sent]
    assert sorted(ids(received)) == ids(received)
    assert len(set(ids(received))) == 5


def test_one_thousand_batched_messages_arrive_in_order(client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=100,
        batching_max_publish_delay_ms=5,
        block_if_queue_full=True,
    )
    failures = []
    for i in range(1000):
        producer.send_async(b"%d" % i, lambda res, _id: res == pulsar.Result.Ok or failures.append(res))
    producer.flush()
    assert failures == []
    messages = receive_n(consumer, 1000, ack=True)
    assert [int(m.data()) for m in messages] == list(range(1000))
    positions = ids(messages)
    assert positions == sorted(positions)
    assert any(batch_index > 0 for _, _, batch_index in positions), "the producer should have batched"
    assert_next_is_marker(consumer, producer)


def test_initial_position_earliest_and_latest(client, topic):
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"old-{i}".encode())
    earliest = client.subscribe(topic, "from-earliest", initial_position=pulsar.InitialPosition.Earliest)
    latest = client.subscribe(topic, "from-latest", initial_position=pulsar.InitialPosition.Latest)
    assert [m.data() for m in receive_n(earliest, 3)] == [b"old-0", b"old-1", b"old-2"]
    producer.send(b"new")
    producer.send(b"end")
    # the next messages of each: an old one (or "new" twice) would come before them
    assert [m.data() for m in receive_n(latest, 2)] == [b"new", b"end"]
    assert [m.data() for m in receive_n(earliest, 2)] == [b"new", b"end"]


def test_existing_subscription_keeps_its_position_whatever_the_initial_position(client, topic):
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Latest)
    producer.send(b"kept-for-the-subscription")
    consumer.close()
    again = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    assert again.receive(5000).data() == b"kept-for-the-subscription"
    assert_next_is_marker(again, producer)


@pytest.mark.slow
def test_get_last_message_id(client, topic):
    consumer = client.subscribe(topic, "sub")
    assert consumer.get_last_message_id().entry_id() == -1  # empty topic
    producer = client.create_producer(topic)
    last = [producer.send(f"m{i}".encode()) for i in range(3)][-1]
    assert msg_id_tuple(consumer.get_last_message_id()) == msg_id_tuple(last)


def test_get_last_message_id_of_a_batch_names_its_last_message(client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=3, batching_max_publish_delay_ms=10_000
    )
    receipts = []
    for i in range(3):
        producer.send_async(f"m{i}".encode(), lambda res, msg_id: receipts.append(msg_id))
    producer.flush()
    assert len(receipts) == 3
    last = max(receipts, key=msg_id_tuple)
    assert last.batch_index() == 2
    assert msg_id_tuple(consumer.get_last_message_id()) == msg_id_tuple(last)


def test_unsubscribe_deletes_the_subscription(broker, client, topic):
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    for i in range(5):
        producer.send(f"backlog-{i}".encode())
    consumer.unsubscribe()
    status, subscriptions = admin_call(
        broker, "GET", "/admin/v2/persistent/" + topic.split("://")[1] + "/subscriptions"
    )
    assert (status, subscriptions) == (200, []), "the broker deleted it"
    # A subscription that survived would hand its five-message backlog to the new consumer.
    again = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Latest)
    producer.send(b"after")
    assert again.receive(5000).data() == b"after", "the next message: the backlog would come first"


def test_closing_producer_consumer_reader_and_client_is_answered(broker, client, topic):
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    producer.send(b"x")
    consumer.receive(5000)
    # Each close returns (the broker answers it: the client would raise Timeout after its
    # operation timeout otherwise) and the broker forgets what was closed.
    producer.close()
    consumer.close()
    reader.close()
    status, stats = admin_call(broker, "GET", "/admin/v2/persistent/" + topic.split("://")[1] + "/stats")
    assert status == 200, stats
    assert stats["publishers"] == [] and stats["subscriptions"]["sub"]["consumers"] == []
    assert list(stats["subscriptions"]) == ["sub"], "the reader's subscription went with it"
    client.close()


def test_receive_times_out_on_an_empty_subscription(client, topic):
    consumer = client.subscribe(topic, "sub")
    with pytest.raises(Timeout):
        consumer.receive(200)
