"""Durability across broker restarts: a clean SIGTERM, and kill -9 in the middle of producing."""

from __future__ import annotations

import threading

import pulsar
import pytest

from ..waiting import eventually
from .support import admin_call, assert_next_is_marker, read_stored, receive_n

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: broker restarts and kill -9

SHARED = pulsar.ConsumerType.Shared


def backlog(broker, topic: str, sub: str) -> int:
    status, stats = admin_call(broker, "GET", "/admin/v2/persistent/" + topic.split("://")[1] + "/stats")
    assert status == 200, stats
    return stats["subscriptions"][sub]["msgBacklog"]


def send_batch(producer, payloads: list[bytes]) -> None:
    """Send ``payloads`` as one batch (the producer batches up to len(payloads) and waits long)."""
    results = []
    for payload in payloads:
        producer.send_async(payload, lambda res, _id: results.append(res))
    producer.flush()
    assert results == [pulsar.Result.Ok] * len(payloads)


def test_restart_after_sigterm_keeps_messages_and_acks(broker, client_factory, topic):
    client = client_factory(broker.service_url)
    options = dict(consumer_type=SHARED, batch_index_ack_enabled=True)
    consumer = client.subscribe(topic, "sub", **options)
    plain = client.create_producer(topic, producer_name="plain")
    batched = client.create_producer(
        topic,
        producer_name="batched",
        batching_enabled=True,
        batching_max_messages=10,
        batching_max_publish_delay_ms=60_000,
    )
    everything = []
    for i in range(10):
        plain.send(b"plain-%d" % i)
        everything.append(b"plain-%d" % i)
    for b in range(3):
        payloads = [b"batch%d-%d" % (b, i) for i in range(10)]
        send_batch(batched, payloads)
        everything += payloads

    messages = {m.data(): m for m in receive_n(consumer, len(everything))}
    assert sorted(messages) == sorted(everything)
    assert [messages[b"batch0-%d" % i].message_id().batch_index() for i in range(10)] == list(range(10))
    to_ack = (
        [b"plain-%d" % i for i in range(0, 10, 2)]
        + [b"batch0-%d" % i for i in (0, 3, 4, 7)]  # part of a batch: batch-index acks
        + [b"batch1-%d" % i for i in range(10)]  # a whole batch
    )
    for payload in to_ack:
        consumer.acknowledge(messages[payload])
    consumer.close()  # flushes the grouped acks
    client.close()

    assert broker.stop() == 0, broker.log_tail()
    broker.restart(same_port=False)

    client = client_factory(broker.service_url)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in read_stored(reader)] == everything, "every receipted message, in order"
    consumer = client.subscribe(topic, "sub", **options)
    redelivered = [m.data() for m in receive_n(consumer, len(everything) - len(to_ack))]
    assert sorted(redelivered) == sorted(set(everything) - set(to_ack))
    assert_next_is_marker(consumer, client.create_producer(topic))  # none of the acknowledged ones


def test_restart_on_the_same_port_lets_the_same_client_reconnect(broker, client, topic):
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub")
    producer.send(b"before")
    before = consumer.receive(5000)
    assert before.data() == b"before"
    consumer.acknowledge(before)
    eventually(lambda: backlog(broker, topic, "sub") == 0, what="the grouped ack at the broker")
    assert broker.stop() == 0
    broker.restart(same_port=True)
    producer.send(b"after")  # the client reconnects by itself
    assert consumer.receive(10_000).data() == b"after"
    assert_next_is_marker(consumer, producer)


def test_kill9_while_producing_keeps_every_receipted_message(broker, client_factory, topic):
    client = client_factory(broker.service_url)
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_publish_delay_ms=1,
        block_if_queue_full=True,
        max_pending_messages=2000,
    )
    succeeded: set[bytes] = set()
    answered = [0]  # sends called back, whatever their result
    lock = threading.Lock()

    def on_done(payload: bytes):
        def callback(res, _msg_id):
            with lock:
                answered[0] += 1
                if res == pulsar.Result.Ok:
                    succeeded.add(payload)

        return callback

    sent = 0
    while True:
        with lock:
            enough = len(succeeded) >= 5000
        if enough:
            break
        assert sent < 200_000, "the broker stopped acknowledging"
        producer.send_async(b"%d" % sent, on_done(b"%d" % sent))
        sent += 1
    broker.kill9()  # with up to max_pending_messages still in flight
    client.close()  # fails the sends still pending
    eventually(lambda: answered[0] == sent, what="every send called back")
    with lock:
        receipted = set(succeeded)
    assert 5000 <= len(receipted) <= sent

    broker.restart(same_port=True)
    reader = client_factory(broker.service_url).create_reader(topic, pulsar.MessageId.earliest)
    stored = [m.data() for m in read_stored(reader)]
    assert len(stored) == len(set(stored)), "no message stored twice"
    missing = receipted - set(stored)
    assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
    numbers = [int(p) for p in stored]
    assert numbers == sorted(numbers), "stored in the order sent"
