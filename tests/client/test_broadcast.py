"""Broadcast subscriptions from our client (``ConsumerType.Broadcast``), and shared with the
official client's consumers on one subscription."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.client import ConsumerType, Timeout

pytestmark = pytest.mark.interop

BROADCAST = {"magnetar.subscription.type": "Broadcast"}


def receive_all(consumer, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        msg = consumer.receive(5000)
        consumer.acknowledge(msg)
        out.append(msg.data())
    return out


def test_our_broadcast_consumers_each_receive_everything(magnetar_client, topic):
    consumers = [
        magnetar_client.subscribe(
            topic,
            "fans",
            consumer_type=ConsumerType.Broadcast,
            consumer_name=f"c{i}",
            negative_ack_redelivery_delay_ms=100,
        )
        for i in range(4)
    ]
    producer = magnetar_client.create_producer(topic, batching_enabled=True, batching_max_messages=10)
    sent = [b"ours-%d" % i for i in range(35)]
    for data in sent:
        producer.send_async(data, None)
    producer.flush()
    for consumer in consumers:
        assert receive_all(consumer, len(sent)) == sent
    # Each may also acknowledge cumulatively, and a nack comes back to it alone.
    more = [b"later-%d" % i for i in range(3)]
    for data in more:
        producer.send(data)
    first, second = consumers[0], consumers[1]
    got = [first.receive(5000) for _ in more]
    first.acknowledge_cumulative(got[-1])
    got = [second.receive(5000) for _ in more]
    second.acknowledge(got[0])
    second.acknowledge(got[2])
    second.negative_acknowledge(got[1])
    for consumer in consumers[2:]:
        assert receive_all(consumer, 3) == more
    again = second.receive(5000)
    assert again.data() == more[1] and again.redelivery_count() == 1
    second.acknowledge(again)
    for consumer in consumers:
        with pytest.raises(Timeout):
            consumer.receive(300)


def test_official_and_our_consumers_share_one_broadcast_subscription(
    broker, magnetar_client, client_factory, topic
):
    official = client_factory(broker.service_url)
    theirs = official.subscribe(
        topic,
        "mixed",
        consumer_type=pulsar.ConsumerType.Shared,
        properties=BROADCAST,
        consumer_name="official",
    )
    ours = magnetar_client.subscribe(
        topic, "mixed", consumer_type=ConsumerType.Broadcast, consumer_name="ours"
    )
    sent = [b"from-official-%d" % i for i in range(5)]
    producer = official.create_producer(topic)
    for data in sent:
        producer.send(data)
    sent_ours = [b"from-ours-%d" % i for i in range(5)]
    our_producer = magnetar_client.create_producer(topic)
    for data in sent_ours:
        our_producer.send(data)
    assert receive_all(ours, 10) == sent + sent_ours
    got = []
    for _ in range(10):
        msg = theirs.receive(5000)
        theirs.acknowledge(msg)
        got.append(msg.data())
    assert got == sent + sent_ours
