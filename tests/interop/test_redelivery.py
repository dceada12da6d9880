"""Redelivery with the official client: negative acks, ack timeout, dead-letter topic, cumulative acks."""

from __future__ import annotations

import time

import pulsar
import pytest

from ..waiting import eventually
from .support import admin_call, assert_next_is_marker, msg_id_tuple, receive_n

pytestmark = pytest.mark.interop

NACK_DELAY_MS = 100


def sub_stats(broker, topic: str, sub: str = "sub") -> dict:
    """The subscription's part of the broker's topic stats."""
    status, stats = admin_call(broker, "GET", "/admin/v2/persistent/" + topic.split("://")[1] + "/stats")
    assert status == 200, stats
    return stats["subscriptions"][sub]


def assert_all_acknowledged_then_marker(broker, topic: str, consumer, producer) -> None:
    """Nothing more comes: with every message acknowledged at the broker, a redelivery (by the
    client's timer or the broker) has nothing left to send, and the marker comes next."""
    eventually(lambda: sub_stats(broker, topic)["msgBacklog"] == 0, what="every message acknowledged")
    assert_next_is_marker(consumer, producer)


@pytest.mark.parametrize(
    "kind", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.Exclusive], ids=["shared", "exclusive"]
)
def test_negative_ack_redelivers_only_that_message(broker, client, topic, kind):
    consumer = client.subscribe(
        topic, "sub", consumer_type=kind, negative_ack_redelivery_delay_ms=NACK_DELAY_MS
    )
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    first, second, third = receive_n(consumer, 3)
    consumer.acknowledge(first)
    consumer.acknowledge(third)
    # the grouped acks reach the broker before the redelivery request
    eventually(lambda: sub_stats(broker, topic)["msgBacklog"] == 1, what="the acks at the broker")
    consumer.negative_acknowledge(second)

    again = consumer.receive(5000)
    assert again.data() == b"m1"
    assert msg_id_tuple(again.message_id()) == msg_id_tuple(second.message_id())
    if kind == pulsar.ConsumerType.Shared:  # Pulsar counts redeliveries for Shared subscriptions
        assert again.redelivery_count() == 1
    consumer.acknowledge(again)
    assert_all_acknowledged_then_marker(broker, topic, consumer, producer)


def test_negative_ack_of_a_message_in_a_batch(broker, client, topic):
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=NACK_DELAY_MS,
        batch_index_ack_enabled=True,
    )
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=3, batching_max_publish_delay_ms=10_000
    )
    for i in range(3):
        producer.send_async(f"m{i}".encode(), lambda res, _id: None)
    producer.flush()
    messages = receive_n(consumer, 3)
    consumer.acknowledge(messages[0])
    consumer.acknowledge(messages[2])
    # the grouped acks (of two of the batch's three messages) reach the broker before the
    # redelivery request
    eventually(
        lambda: sub_stats(broker, topic)["ackState"]["partial_batches"] == 1, what="the acks at the broker"
    )
    consumer.negative_acknowledge(messages[1])
    again = consumer.receive(5000)
    assert again.data() == b"m1"
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)
    # the marker unbatched: the batching producer would hold it for its publish delay
    assert_all_acknowledged_then_marker(broker, topic, consumer, client.create_producer(topic))


@pytest.mark.slow
def test_ack_timeout_redelivers_unacked_message(broker, client, topic):
    # 10 s is the smallest ack timeout the C++ client accepts.
    consumer = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, unacked_messages_timeout_ms=10_000
    )
    producer = client.create_producer(topic)
    producer.send(b"acked")
    producer.send(b"forgotten")
    acked, forgotten = receive_n(consumer, 2)
    consumer.acknowledge(acked)
    started = time.monotonic()
    again = consumer.receive(20_000)
    # The ack timeout is the behaviour: a lower bound (a slow machine only makes it longer).
    assert time.monotonic() - started >= 5, "redelivered long before the ack timeout"
    assert again.data() == b"forgotten"
    assert msg_id_tuple(again.message_id()) == msg_id_tuple(forgotten.message_id())
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)
    assert_all_acknowledged_then_marker(broker, topic, consumer, producer)


def test_dead_letter_topic_after_max_redeliveries(broker, client, topic):
    dlq_topic = f"{topic}-sub-DLQ"  # the client's default name: <topic>-<subscription>-DLQ
    dlq = client.subscribe(dlq_topic, "dlq-reader", initial_position=pulsar.InitialPosition.Earliest)
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=NACK_DELAY_MS,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=2),
    )
    producer = client.create_producer(topic)
    original_id = producer.send(b"poison", properties={"kind": "poison"})
    producer.send(b"fine")

    counts = []
    for _ in range(3):
        msg = consumer.receive(5000)
        if msg.data() == b"fine":
            consumer.acknowledge(msg)
            msg = consumer.receive(5000)
        assert msg.data() == b"poison"
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2]

    dead = dlq.receive(10_000)
    assert dead.data() == b"poison"
    assert dead.properties()["kind"] == "poison"
    assert dead.properties()["ORIGIN_MESSAGE_ID"] == str(original_id)
    assert dead.properties()["REAL_TOPIC"] == topic
    dlq.acknowledge(dead)
    # The client acked the original once it reached the DLQ: acknowledged, it never comes back.
    eventually(lambda: sub_stats(broker, topic)["msgBacklog"] == 0, what="the original acknowledged")
    eventually(lambda: sub_stats(broker, dlq_topic, "dlq-reader")["msgBacklog"] == 0, what="the DLQ acked")


@pytest.mark.parametrize("batched", [False, True], ids=["plain", "batch-index"])
def test_cumulative_ack_survives_reconnect(client_factory, broker, topic, batched):
    client = client_factory(broker.service_url)
    options = dict(consumer_type=pulsar.ConsumerType.Exclusive, batch_index_ack_enabled=batched)
    consumer = client.subscribe(topic, "sub", **options)
    producer = client.create_producer(
        topic, batching_enabled=batched, batching_max_messages=10, batching_max_publish_delay_ms=10_000
    )
    for i in range(10):
        producer.send_async(f"m{i}".encode(), lambda res, _id: None)
    producer.flush()
    messages = receive_n(consumer, 10)
    consumer.acknowledge_cumulative(messages[5])
    consumer.close()
    client.close()

    client = client_factory(broker.service_url)
    again = client.subscribe(topic, "sub", **options)
    rest = receive_n(again, 4)
    assert [m.data() for m in rest] == [b"m6", b"m7", b"m8", b"m9"]
    assert_next_is_marker(again, client.create_producer(topic))
