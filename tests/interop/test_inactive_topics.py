"""Topics nobody uses leave the broker's memory and files, and come back on their next use
(issue 40): unloaded after ``broker_unload_inactive_topics_seconds``, their subscriptions where
they were."""

from __future__ import annotations

import os

import pulsar
import pytest

from ..waiting import eventually
from .support import assert_next_is_marker, receive_n, scrape

pytestmark = pytest.mark.interop

SHARED = pulsar.ConsumerType.Shared
#: Checked five times a second, unloaded after half a second unused.
QUICK_UNLOAD = {
    "broker_delete_inactive_topics_frequency_seconds": 0.2,
    "broker_unload_inactive_topics_seconds": 0.5,
}


def metric(broker, name: str) -> float:
    return sum(value for (sample, _), value in scrape(broker).items() if sample == name)


def ledger_files_open(pid: int, data_dir: str) -> int:
    """Descriptors the broker holds on segment files (.log, .idx) under its data directory."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(data_dir) and target.endswith((".log", ".idx"))
    return count


def test_an_idle_topic_is_unloaded_and_loads_again_with_its_subscriptions_where_they_were(
    broker_factory, client_factory, topic
):
    broker = broker_factory(QUICK_UNLOAD)
    pid = broker.proc.pid
    assert pid is not None
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub", consumer_type=SHARED)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(b"m%d" % i)
    received = receive_n(consumer, 10)
    for message in [*received[:4], received[6]]:  # the first four, and one past a hole
        consumer.acknowledge(message)
    consumer.close()  # flushes the grouped acks
    producer.close()

    eventually(lambda: metric(broker, "magnetar_inactive_topics_unloaded_total") >= 1, what="an unload")
    assert metric(broker, "magnetar_topics_loaded") == 0
    eventually(lambda: ledger_files_open(pid, str(broker.data_dir)) == 0, what="its files closed")

    consumer = client.subscribe(topic, "sub", consumer_type=SHARED)
    again = receive_n(consumer, 5, ack=True)
    assert sorted(m.data() for m in again) == [b"m4", b"m5", b"m7", b"m8", b"m9"]
    assert metric(broker, "magnetar_topics_loaded") == 1
    assert_next_is_marker(consumer, client.create_producer(topic))  # nothing acknowledged comes again


def test_a_topic_in_use_stays_loaded(broker_factory, client_factory, topic):
    """A producer, a consumer or a reader keeps its topic loaded, however quiet."""
    broker = broker_factory(QUICK_UNLOAD)
    client = client_factory(broker.service_url)
    producer = client.create_producer(f"{topic}-produced")
    client.subscribe(f"{topic}-consumed", "sub")
    reader = client.create_reader(f"{topic}-read", pulsar.MessageId.earliest)
    client.create_producer(f"{topic}-idle").close()
    eventually(lambda: metric(broker, "magnetar_inactive_topics_unloaded_total") >= 1, what="an unload")
    assert metric(broker, "magnetar_topics_loaded") == 3
    producer.send(b"still here")
    assert reader.has_message_available() is False
