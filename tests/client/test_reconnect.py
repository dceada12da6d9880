"""Producers and consumers ride out a broker restart: reconnect with backoff, resend, resubscribe."""

from __future__ import annotations

import signal
import threading
import time

from magnetar.client import ConsumerType, InitialPosition, Result
from tests.waiting import eventually


def test_producer_and_consumer_survive_a_restart(broker, magnetar_factory, topic):
    client = magnetar_factory(broker.service_url, max_backoff_seconds=0.5)
    consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(b"before-%d" % i)
    got = [consumer.receive(5000) for _ in range(5)]
    for msg in got:
        consumer.acknowledge(msg)

    broker.stop(signal.SIGTERM)
    eventually(lambda: not producer.is_connected() and not consumer.is_connected(), what="both disconnected")
    broker.restart()
    for i in range(5):
        producer.send(b"after-%d" % i)  # waits for the reconnect, then gets its receipt
    eventually(consumer.is_connected, what="the consumer reconnected")
    after = [consumer.receive(10_000) for _ in range(5)]
    assert [m.data() for m in after] == [b"after-%d" % i for i in range(5)]


def test_pending_sends_are_resent_in_order_after_a_crash(broker, magnetar_factory, topic):
    client = magnetar_factory(broker.service_url, max_backoff_seconds=0.5)
    consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(topic, send_timeout_millis=30_000)
    broker.stop(signal.SIGKILL)
    eventually(lambda: not producer.is_connected(), what="the producer disconnected")
    results = []
    done = threading.Event()

    def callback(res, msg_id):
        results.append((res, msg_id))
        if len(results) == 20:
            done.set()

    for i in range(20):
        producer.send_async(b"%d" % i, callback)  # queued while the broker is down
    broker.restart()
    assert done.wait(20)
    assert all(res == Result.Ok for res, _ in results)
    ids = [msg_id for _, msg_id in results]
    assert ids == sorted(ids)
    received = [consumer.receive(10_000).data() for _ in range(20)]
    assert received == [b"%d" % i for i in range(20)]


def test_send_times_out_when_the_broker_stays_away(broker, magnetar_factory, topic):
    client = magnetar_factory(broker.service_url, max_backoff_seconds=0.2)
    producer = client.create_producer(topic, send_timeout_millis=500)
    broker.stop(signal.SIGKILL)
    results = []
    done = threading.Event()
    producer.send_async(b"lost", lambda res, msg_id: (results.append(res), done.set()))
    assert done.wait(5)
    assert results == [Result.Timeout]


def test_a_nack_pending_across_a_reconnect_brings_the_message_once(broker, magnetar_factory, topic):
    """The broker sends everything unacknowledged again on the new connection; a negative ack
    due from before it must not ask for the message once more (it came twice, back to back, and
    the second copy after the application had acknowledged the first)."""
    client = magnetar_factory(broker.service_url, max_backoff_seconds=0.5)
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        initial_position=InitialPosition.Earliest,
    )
    producer = client.create_producer(topic)
    producer.send(b"nacked")
    consumer.negative_acknowledge(consumer.receive(5000))
    nacked_at = time.monotonic()
    broker.stop(signal.SIGTERM)
    eventually(lambda: not consumer.is_connected(), what="the consumer disconnected")
    broker.restart()
    eventually(consumer.is_connected, what="the consumer reconnected")
    # The negative ack's delay and a few of the consumer's 100 ms timer ticks pass (the timer is
    # the behaviour here): a redelivery it asked for would be queued behind the first copy now.
    connected_at = time.monotonic()
    eventually(lambda: time.monotonic() > max(nacked_at + 0.1, connected_at + 0.4), what="timer ticks")
    again = consumer.receive(10_000)
    assert again.data() == b"nacked"
    consumer.acknowledge(again)
    producer.send(b"after")
    assert consumer.receive(10_000).data() == b"after"
