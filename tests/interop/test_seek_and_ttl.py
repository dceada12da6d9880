"""Seek by message id and by time on every subscription type, and message TTL."""

from __future__ import annotations

import time

import pulsar
import pytest

from ..waiting import eventually
from .support import admin_call as call
from .support import assert_next_is_marker, receive_n

pytestmark = pytest.mark.interop


def backlog(broker, topic: str, sub: str) -> int:
    status, stats = call(broker, "GET", "/admin/v2/persistent/" + topic.split("://")[1] + "/stats")
    assert status == 200, stats
    return stats["subscriptions"][sub]["msgBacklog"]


TYPES = [
    pulsar.ConsumerType.Exclusive,
    pulsar.ConsumerType.Failover,
    pulsar.ConsumerType.Shared,
    pulsar.ConsumerType.KeyShared,
]


@pytest.mark.parametrize("consumer_type", TYPES, ids=lambda t: t.name)
def test_seek_by_message_id_and_time_on_every_type(client, topic, consumer_type):
    consumer = client.subscribe(topic, "sub", consumer_type=consumer_type)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    for i in range(10):
        ids.append(producer.send(b"%d" % i))
        if i == 5:  # a time between m5's and m6's, in milliseconds: the pauses are the behaviour
            time.sleep(0.05)
            middle_time = int(time.time() * 1000)
            time.sleep(0.05)
    for msg in receive_n(consumer, 10):
        consumer.acknowledge(msg)

    consumer.seek(ids[3])  # the C++ client's seek is exclusive of the given message by default
    again = receive_n(consumer, 6, timeout_ms=10_000)
    assert sorted(int(m.data()) for m in again) == list(range(4, 10))
    for msg in again:
        consumer.acknowledge(msg)
    assert_next_is_marker(consumer, producer)

    consumer.seek(middle_time)
    by_time = receive_n(consumer, 5, timeout_ms=10_000)
    assert sorted(m.data() for m in by_time) == [b"6", b"7", b"8", b"9", b"marker"]


def test_seek_to_earliest_on_an_empty_topic_and_to_another_topics_id(client, topic):
    consumer = client.subscribe(topic, "sub")
    consumer.seek(pulsar.MessageId.earliest)
    producer = client.create_producer(topic)
    producer.send(b"first")
    assert consumer.receive(10_000).data() == b"first"

    other = client.create_producer(topic + "-other")
    for _ in range(3):
        other.send(b"x")
    foreign = other.send(b"y")
    with pytest.raises(pulsar.PulsarException):
        consumer.seek(foreign)
    producer.send(b"second")
    assert consumer.receive(10_000).data() == b"second", "the consumer keeps working"


@pytest.mark.slow
def test_message_ttl_expires_old_messages_for_every_subscription(broker_factory, client_factory, topic):
    broker = broker_factory({"message_expiry_check_interval_seconds": 0.3})
    client = client_factory(broker.service_url)
    client.subscribe(topic, "slow").close()  # the subscription exists, nobody reads
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(b"old-%d" % i)
    assert call(broker, "POST", "/admin/v2/namespaces/public/default/messageTTL", 1)[0] == 204
    eventually(lambda: backlog(broker, topic, "slow") == 0, what="the old messages expired")
    consumer = client.subscribe(topic, "slow")
    producer.send(b"fresh")
    # The next message (an expired one that came back would come before it), and the only one.
    assert consumer.receive(5000).data() == b"fresh"
    assert_next_is_marker(consumer, producer)
