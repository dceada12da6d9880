"""Topics nobody uses leave the broker's memory and files, and come back on their next use
(issue 40): unloaded after ``broker_unload_inactive_topics_seconds``, their subscriptions where
they were."""

from __future__ import annotations

import os

import pulsar
import pytest

from ..waiting import eventually
from .support import admin_call, assert_next_is_marker, receive_n, scrape

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


# -- inactive-topic policies: deleting topics nobody uses ------------------------------------------------

QUICK_DELETE = {
    **QUICK_UNLOAD,
    "broker_delete_inactive_topics_enabled": True,
    "broker_delete_inactive_topics_max_inactive_duration_seconds": 0.5,
}


def stored_topics(broker) -> list[str]:
    status, names = admin_call(broker, "GET", "/admin/v2/persistent/public/default")
    assert status == 200, names
    return names


def test_an_unused_topic_without_subscriptions_is_deleted_and_a_backlog_is_never(
    broker_factory, client_factory, topic
):
    broker = broker_factory(QUICK_DELETE)
    client = client_factory(broker.service_url)
    nobody, waiting = f"{topic}-nobody", f"{topic}-waiting"
    client.subscribe(waiting, "sub").close()  # a durable subscription, its backlog to come
    for name in (nobody, waiting):
        producer = client.create_producer(name)
        producer.send(b"kept for sub" if name == waiting else b"read by nobody")
        producer.close()
    eventually(lambda: nobody not in stored_topics(broker), what="the topic nobody reads deleted")
    eventually(lambda: metric(broker, "magnetar_inactive_topics_unloaded_total") >= 1, what="an unload")
    assert waiting in stored_topics(broker)  # unloaded, never deleted: its subscription has a backlog
    consumer = client.subscribe(waiting, "sub")
    assert receive_n(consumer, 1, ack=True)[0].data() == b"kept for sub"
    assert metric(broker, "magnetar_inactive_topics_deleted_total") == 1


def test_a_namespace_policy_deletes_topics_whose_subscriptions_caught_up(
    broker_factory, client_factory, topic
):
    broker = broker_factory(QUICK_UNLOAD)  # the broker deletes nothing: the namespace's policy does
    path = "/admin/v2/namespaces/public/default/inactiveTopicPolicies"
    assert admin_call(broker, "GET", path) == (204, None)
    policies = {
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
        "maxInactiveDurationSeconds": 1,
        "deleteWhileInactive": True,
    }
    assert admin_call(broker, "POST", path, policies)[0] == 204
    assert admin_call(broker, "GET", path) == (200, policies)
    assert admin_call(broker, "POST", path, {**policies, "inactiveTopicDeleteMode": "sometimes"})[0] == 400
    client = client_factory(broker.service_url)
    read, unread, kept = f"{topic}-read", f"{topic}-unread", f"{topic}-kept"
    # The topic's own policy wins over the namespace's.
    local = kept.removeprefix("persistent://")
    own = {**policies, "deleteWhileInactive": False}
    assert admin_call(broker, "POST", f"/admin/v2/persistent/{local}/inactiveTopicPolicies", own)[0] == 204
    applied = admin_call(broker, "GET", f"/admin/v2/persistent/{local}/inactiveTopicPolicies?applied=true")
    assert applied == (200, own)
    for name in (read, unread, kept):
        consumer = client.subscribe(name, "sub")
        producer = client.create_producer(name)
        producer.send(b"one")
        producer.close()
        message = receive_n(consumer, 1)[0]
        if name != unread:
            consumer.acknowledge(message)
        consumer.close()
    eventually(lambda: read not in stored_topics(broker), what="the caught-up topic deleted")
    eventually(
        lambda: metric(broker, "magnetar_inactive_topics_unloaded_total") >= 2, what="the others unloaded"
    )
    assert {unread, kept} <= set(stored_topics(broker))
    assert receive_n(client.subscribe(unread, "sub"), 1)[0].data() == b"one"


def test_by_default_an_unused_topic_is_unloaded_never_deleted(broker_factory, client_factory, topic):
    """Magnetar's default (Pulsar's is to delete): a topic produced to before anyone subscribes keeps
    its messages for the subscription made with Earliest later."""
    broker = broker_factory(QUICK_UNLOAD)
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic)
    producer.send(b"for later")
    producer.close()
    eventually(lambda: metric(broker, "magnetar_inactive_topics_unloaded_total") >= 1, what="an unload")
    consumer = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
    assert receive_n(consumer, 1)[0].data() == b"for later"
