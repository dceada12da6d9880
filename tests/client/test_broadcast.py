"""Broadcast subscriptions from our client (``ConsumerType.Broadcast``), and shared with the
official client's consumers on one subscription."""

from __future__ import annotations

import urllib.parse

import pulsar
import pytest

from magnetar.client import ConsumerType
from tests.interop.support import admin_call
from tests.waiting import eventually

from .proxy import ShrinkingProxy

pytestmark = pytest.mark.interop

BROADCAST = {"magnetar.subscription.type": "Broadcast"}


def receive_all(consumer, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        msg = consumer.receive(5000)
        consumer.acknowledge(msg)
        out.append(msg.data())
    return out


@pytest.mark.slow
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
    # Nothing else comes: a last message is the next one each receives.
    producer.send(b"last")
    for consumer in consumers:
        assert consumer.receive(5000).data() == b"last"


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


def test_consumers_that_lose_their_connection_resume_where_they_were(
    broker, magnetar_factory, client_factory, topic
):
    """Both clients reconnect by themselves after the network drops; each gets again what it had
    not acknowledged and then what came since, and nothing it had acknowledged."""
    with ShrinkingProxy(broker.port, shrink_by=0) as proxy:
        theirs = client_factory(proxy.service_url).subscribe(
            topic,
            "cars",
            consumer_type=pulsar.ConsumerType.Shared,
            properties=BROADCAST,
            consumer_name="car-1",
        )
        ours = magnetar_factory(proxy.service_url).subscribe(
            topic, "cars", consumer_type=ConsumerType.Broadcast, consumer_name="car-2"
        )
        direct = magnetar_factory(broker.service_url)
        # A slow consumer holds the subscription at its start: a new consumer would begin there.
        direct.subscribe(topic, "cars", consumer_type=ConsumerType.Broadcast, consumer_name="slow")
        producer = direct.create_producer(topic, batching_enabled=False)
        sent = [b"m-%d" % i for i in range(6)]
        for data in sent:
            producer.send(data)
        for consumer in (theirs, ours):
            got = [consumer.receive(5000) for _ in sent]
            assert [m.data() for m in got] == sent
            for msg in got[:3]:
                consumer.acknowledge(msg)
        expected = {"car-1": "2", "car-2": "2", "slow": "-1"}
        eventually(lambda: acked_are(broker, topic, expected), what="the acks in")
        proxy.cut()
        more = [b"later-%d" % i for i in range(2)]
        for data in more:
            producer.send(data)
        for consumer in (theirs, ours):
            got = [consumer.receive(10_000) for _ in range(5)]
            assert [m.data() for m in got] == sent[3:] + more
            for msg in got:
                consumer.acknowledge(msg)
        expected = {"car-1": "7", "car-2": "7", "slow": "-1"}
        eventually(lambda: acked_are(broker, topic, expected), what="the acks after the reconnect in")


def acked_are(broker, topic: str, expected: dict[str, str]) -> bool:
    assert acked_by(broker, topic, "cars") == expected
    return True


def acked_by(broker, topic: str, sub: str) -> dict[str, str]:
    """Each consumer's virtual mark-delete position, as the entry id it has acknowledged up to."""
    path = urllib.parse.urlparse(topic)
    status, stats = admin_call(broker, "GET", f"/admin/v2/persistent/{path.netloc}{path.path}/stats")
    assert status == 200, stats
    consumers = stats["subscriptions"][sub]["consumers"]
    return {c["consumerName"]: c["markDeletePosition"].split(":")[1] for c in consumers}
