"""Broadcast subscriptions with the official client: every consumer of one subscription receives
every message. The official Python client asks for one with a consumer property."""

from __future__ import annotations

import urllib.parse

import pulsar
import pytest
from pulsar.exceptions import ConsumerBusy

from ..waiting import eventually
from .support import admin_call, expect_markers, receive_n

pytestmark = pytest.mark.interop

SHARED = pulsar.ConsumerType.Shared
EXCLUSIVE = pulsar.ConsumerType.Exclusive
BROADCAST = {"magnetar.subscription.type": "Broadcast"}


def fan(client, topic: str, name: str, consumer_type=SHARED, sub: str = "fans", **kwargs):
    return client.subscribe(
        topic, sub, consumer_type=consumer_type, consumer_name=name, properties=BROADCAST, **kwargs
    )


def produce(producer, n: int, prefix: str = "m") -> list[bytes]:
    payloads = [f"{prefix}-{i}".encode() for i in range(n)]
    for payload in payloads:
        producer.send(payload)
    return payloads


def subscription_stats(broker, topic: str, sub: str = "fans") -> dict:
    path = urllib.parse.urlparse(topic)
    status, stats = admin_call(broker, "GET", f"/admin/v2/persistent/{path.netloc}{path.path}/stats")
    assert status == 200, stats
    return stats["subscriptions"][sub]


def backlog_of(broker, topic: str, expected: int) -> dict:
    """The subscription's stats once its backlog is ``expected`` (acks are grouped by the client)."""

    def check() -> dict:
        stats = subscription_stats(broker, topic)
        assert stats["msgBacklog"] == expected, stats
        return stats

    return eventually(check, what=f"a backlog of {expected}")


def test_every_consumer_receives_every_message_in_order(broker, client, topic):
    consumers = [fan(client, topic, f"car-{i}") for i in range(8)]
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    futures_done = []
    payloads = [f"b-{i}".encode() for i in range(200)]
    for payload in payloads:
        producer.send_async(payload, lambda res, _id: futures_done.append(res))
    producer.flush()
    sent = payloads + produce(producer, 20, "single")
    for consumer in consumers:
        assert [m.data() for m in receive_n(consumer, len(sent), ack=True)] == sent
    producer.send(b"end")  # each consumer's next message: a message twice would come before it
    for consumer in consumers:
        assert [m.data() for m in receive_n(consumer, 1, ack=True)] == [b"end"]
    stats = backlog_of(broker, topic, 0)
    assert stats["type"] == "Broadcast"
    assert stats["dispatcher"]["virtualCursors"] == 8
    # One read of each entry served all eight consumers.
    stored_entries = stats["dispatcher"]["entriesRead"]
    assert stored_entries < 2 * (20 + 200 + 1), stats["dispatcher"]
    assert {c["consumerName"] for c in stats["consumers"]} == {f"car-{i}" for i in range(8)}


def test_a_consumer_far_behind_the_read_window_still_gets_every_message(broker, client, topic):
    """A burst of 2,500 entries: the fast consumer reads them all while the slow one (a receiver
    queue of 10) is held back further than the dispatcher keeps entries read (1,000,
    ``broadcast_reads.WINDOW_ENTRIES``); the slow one reads them again from the files, in order."""
    fast = fan(client, topic, "fast")
    slow = fan(client, topic, "slow", receiver_queue_size=10)
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    payloads = [f"w-{i}".encode() for i in range(2500)]
    results: list[pulsar.Result] = []
    for payload in payloads:
        producer.send_async(payload, lambda res, _id: results.append(res))
    producer.flush()
    eventually(lambda: len(results) == len(payloads), what="every send answered")
    assert set(results) == {pulsar.Result.Ok}
    assert [m.data() for m in receive_n(fast, len(payloads), ack=True)] == payloads
    assert [m.data() for m in receive_n(slow, len(payloads), ack=True)] == payloads
    assert backlog_of(broker, topic, 0)["dispatcher"]["entriesRead"] > len(payloads)  # read again


def test_the_slowest_consumer_holds_the_subscription_across_a_restart(broker, client_factory, topic):
    client = client_factory(broker.service_url)
    fast = fan(client, topic, "fast")
    slow = fan(client, topic, "slow")
    sent = produce(client.create_producer(topic), 10)
    for message in receive_n(fast, 10):
        fast.acknowledge(message)
    for message in receive_n(slow, 10)[:4]:
        slow.acknowledge(message)
    stats = backlog_of(broker, topic, 6)
    assert (
        stats["markDeletePosition"]
        == {c["consumerName"]: c for c in stats["consumers"]}["slow"]["markDeletePosition"]
    )
    broker.stop()  # with both consumers connected: a clean stop stores the cursor where the slow one is
    broker.restart()
    later = fan(client_factory(broker.service_url), topic, "later")
    assert [m.data() for m in receive_n(later, 6)] == sent[4:]


def test_a_consumer_leaving_releases_what_only_it_held(broker, client, topic):
    fast = fan(client, topic, "fast")
    slow = fan(client, topic, "slow")
    produce(client.create_producer(topic), 5)
    receive_n(fast, 5, ack=True)
    receive_n(slow, 5)
    backlog_of(broker, topic, 5)
    slow.close()
    backlog_of(broker, topic, 0)


def test_a_negative_ack_is_redelivered_to_that_consumer_only(broker, client, topic):
    picky = fan(client, topic, "picky", negative_ack_redelivery_delay_ms=100)
    calm = fan(client, topic, "calm")
    producer = client.create_producer(topic)
    sent = produce(producer, 3)
    got = receive_n(picky, 3)
    picky.acknowledge(got[0])
    picky.negative_acknowledge(got[1])
    picky.acknowledge(got[2])
    assert [m.data() for m in receive_n(calm, 3, ack=True)] == sent
    again = picky.receive(5000)
    assert again.data() == sent[1] and again.redelivery_count() == 1
    picky.acknowledge(again)
    # every message acknowledged by both: nothing is left to redeliver, and a marker comes next to each
    backlog_of(broker, topic, 0)
    producer.send(b"marker")
    expect_markers(calm, [b"marker"])
    expect_markers(picky, [b"marker"])


def test_exclusive_declared_consumers_share_it_and_ack_cumulatively(broker, client, topic):
    first = fan(client, topic, "one", consumer_type=EXCLUSIVE)
    second = fan(client, topic, "two", consumer_type=EXCLUSIVE)
    sent = produce(client.create_producer(topic), 6)
    for consumer in (first, second):
        got = receive_n(consumer, 6)
        assert [m.data() for m in got] == sent
        consumer.acknowledge_cumulative(got[-1])
    backlog_of(broker, topic, 0)


def test_a_plain_consumer_is_refused_while_broadcast_consumers_are_connected(client, topic):
    fan(client, topic, "broadcaster")
    with pytest.raises(ConsumerBusy):
        client.subscribe(topic, "fans", consumer_type=SHARED)
    # A subscription takes the kind of its first consumer, as with types.
    plain = client.subscribe(topic, "plain", consumer_type=SHARED)
    with pytest.raises(ConsumerBusy):
        fan(client, topic, "late", sub="plain")
    plain.close()


def test_chunked_messages_reach_every_consumer_whole(broker_factory, client_factory, topic):
    broker = broker_factory({"max_message_size": 64 * 1024})
    client = client_factory(broker.service_url)
    consumers = [fan(client, topic, f"c{i}") for i in range(3)]
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    big = bytes(range(256)) * 1200  # ~300 KB: 5 chunks of at most 64 KiB
    producer.send(big)
    producer.send(b"small")
    for consumer in consumers:
        assert [m.data() for m in receive_n(consumer, 2, ack=True)] == [big, b"small"]


def test_a_non_persistent_broadcast_subscription_reaches_every_consumer(client, topic):
    np_topic = topic.replace("persistent://", "non-persistent://")
    consumers = [fan(client, np_topic, f"c{i}") for i in range(3)]
    producer = client.create_producer(np_topic)
    sent = produce(producer, 5)
    for consumer in consumers:
        assert [m.data() for m in receive_n(consumer, 5, ack=True)] == sent
