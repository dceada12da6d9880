"""Subscription types with the official client: Exclusive, Failover, Shared, and a large backlog on each."""

from __future__ import annotations

import threading

import pulsar
import pytest
from pulsar.exceptions import ConsumerBusy, Timeout

from .support import assert_next_is_marker, receive_n, receive_spread

pytestmark = pytest.mark.interop

EXCLUSIVE = pulsar.ConsumerType.Exclusive
SHARED = pulsar.ConsumerType.Shared
FAILOVER = pulsar.ConsumerType.Failover


def produce(producer, prefix: str, n: int) -> list[bytes]:
    payloads = [f"{prefix}-{i}".encode() for i in range(n)]
    for payload in payloads:
        producer.send(payload)
    return payloads


def test_exclusive_refuses_a_second_consumer_and_the_first_keeps_working(client, topic):
    first = client.subscribe(topic, "sub", consumer_type=EXCLUSIVE)
    with pytest.raises(ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=EXCLUSIVE)
    with pytest.raises(ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=SHARED)
    # Same client, same connection: the refusal must not have disturbed it.
    producer = client.create_producer(topic)
    sent = produce(producer, "m", 5)
    assert [m.data() for m in receive_n(first, 5, ack=True)] == sent
    assert_next_is_marker(first, producer)
    # Another subscription on the same topic is not affected by the exclusive one.
    other = client.subscribe(
        topic, "other", consumer_type=EXCLUSIVE, initial_position=pulsar.InitialPosition.Earliest
    )
    assert [m.data() for m in receive_n(other, 5)] == sent


def test_exclusive_subscription_accepts_a_new_consumer_after_the_first_closes(client, topic):
    first = client.subscribe(topic, "sub", consumer_type=EXCLUSIVE)
    first.close()
    second = client.subscribe(topic, "sub", consumer_type=EXCLUSIVE)
    client.create_producer(topic).send(b"to-the-second")
    assert second.receive(5000).data() == b"to-the-second"


def active_and_standby(consumers, timeout_ms: int = 3000):
    """Which consumer of a Failover subscription gets the first message: (active, standby, that message)."""
    for _ in range(timeout_ms // 100):
        for index, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(50)
            except Timeout:
                continue
            return consumer, consumers[1 - index], msg
    raise AssertionError("neither Failover consumer received anything")


def test_failover_has_one_active_consumer_and_the_standby_takes_over(client, topic):
    a = client.subscribe(topic, "sub", consumer_type=FAILOVER, consumer_name="consumer-a")
    b = client.subscribe(topic, "sub", consumer_type=FAILOVER, consumer_name="consumer-b")
    producer = client.create_producer(topic)
    sent = produce(producer, "m", 10)

    active, standby, first = active_and_standby([a, b])
    got = [first, *receive_n(active, 9)]
    assert [m.data() for m in got] == sent
    for msg in got[:5]:
        active.acknowledge(msg)

    active.close()  # flushes the acks of m-0..m-4; m-5..m-9 stay unacked
    # The standby's first messages: any it had been sent while standing by would come before them.
    taken_over = receive_n(standby, 5, ack=True)
    assert [m.data() for m in taken_over] == sent[5:]
    produce(producer, "later", 1)
    assert standby.receive(5000).data() == b"later-0", "the next: one taken over twice would come first"


def test_shared_spreads_messages_round_robin(client, topic):
    consumers = [
        client.subscribe(topic, "sub", consumer_type=SHARED, receiver_queue_size=10) for _ in range(2)
    ]
    producer = client.create_producer(topic)
    sent = produce(producer, "m", 40)
    per_consumer = receive_spread(consumers, producer, expected=40)
    everything = per_consumer[0] + per_consumer[1]
    assert sorted(everything) == sorted(sent), "every message exactly once"
    assert all(len(got) >= 10 for got in per_consumer), [len(got) for got in per_consumer]


def test_shared_hands_a_closed_consumers_unacked_messages_to_the_other(client, topic):
    leaving = client.subscribe(topic, "sub", consumer_type=SHARED, receiver_queue_size=10)
    staying = client.subscribe(topic, "sub", consumer_type=SHARED, receiver_queue_size=10)
    producer = client.create_producer(topic)
    sent = produce(producer, "m", 20)

    unacked, acked = receive_spread([leaving, staying], producer, expected=len(sent), ack=[False, True])
    assert unacked, "the leaving consumer should have received a share"
    assert sorted(unacked + acked) == sorted(sent)

    leaving.close()
    (redelivered,) = receive_spread([staying], producer, expected=len(unacked))
    assert sorted(redelivered) == sorted(unacked)


BACKLOG = 20_000


@pytest.mark.slow
def test_backlog_of_20000_drains_on_every_subscription_type(client, topic):
    subscriptions = {"exclusive": EXCLUSIVE, "failover": FAILOVER, "shared": SHARED}
    for name, kind in subscriptions.items():
        client.subscribe(topic, name, consumer_type=kind).close()  # the subscriptions exist before producing

    producer = client.create_producer(
        topic,
        batching_enabled=True,
        block_if_queue_full=True,
        max_pending_messages=5000,
        batching_max_publish_delay_ms=5,
    )
    failures = []
    for i in range(BACKLOG):
        producer.send_async(b"%d" % i, lambda res, _id: res == pulsar.Result.Ok or failures.append(res))
    producer.flush()
    assert failures == []
    expected = [b"%d" % i for i in range(BACKLOG)]

    problems = {}
    for name, kind in subscriptions.items():
        count = 2 if kind == SHARED else 1
        consumers = [client.subscribe(topic, name, consumer_type=kind) for _ in range(count)]
        per_consumer = receive_spread(consumers, producer, expected=BACKLOG)
        got = [payload for received in per_consumer for payload in received]
        missing, duplicates = set(expected) - set(got), len(got) - len(set(got))
        in_order = kind == SHARED or got == expected
        if missing or duplicates or not in_order:
            problems[name] = (
                f"{len(got)} received, {len(missing)} missing, {duplicates} duplicates, in order: {in_order}"
            )
        for consumer in consumers:
            consumer.close()
    assert problems == {}


def test_official_zero_queue_consumers_share_work_without_holding_messages_back(client, topic):
    # The official client's receiver_queue_size=0 asks for one message per receive (FLOW 1):
    # while one consumer works on a message, the rest go to the other one, none held back.
    busy = client.subscribe(topic, "work", consumer_type=SHARED, receiver_queue_size=0)
    idle = client.subscribe(topic, "work", consumer_type=SHARED, receiver_queue_size=0)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"first")
    assert busy.receive().data() == b"first"  # the C++ zero-queue consumer takes no timeout
    sent = produce(producer, "m", 5)
    got: list[bytes] = []
    # receive() without a timeout, so on a thread: a message held back must fail, not hang.
    reader = threading.Thread(target=lambda: got.extend(idle.receive().data() for _ in range(5)), daemon=True)
    reader.start()
    reader.join(10)
    assert sorted(got) == sorted(sent)
