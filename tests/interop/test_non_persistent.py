"""Non-persistent topics: delivered to the consumers connected now, never stored."""

from __future__ import annotations

import pulsar
import pytest

from tests.waiting import eventually

from .support import admin_call, assert_next_is_marker, receive_n, receive_spread

pytestmark = pytest.mark.interop


@pytest.fixture
def np_topic(topic) -> str:
    return topic.replace("persistent://", "non-persistent://", 1)


def test_connected_consumers_get_messages_later_ones_do_not(broker, client, np_topic):
    exclusive = client.subscribe(np_topic, "a")
    shared = [client.subscribe(np_topic, "b", consumer_type=pulsar.ConsumerType.Shared) for _ in range(2)]
    producer = client.create_producer(np_topic, batching_enabled=False)
    for i in range(10):
        producer.send(b"%d" % i)
    assert [m.data() for m in receive_n(exclusive, 10, ack=True)] == [b"%d" % i for i in range(10)]
    got = [data for received in receive_spread(shared, producer, expected=10) for data in received]
    assert sorted(got) == sorted(b"%d" % i for i in range(10)), "each message to one shared consumer"

    late = client.subscribe(np_topic, "late", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"after")
    assert late.receive(5000).data() == b"after", "its first: nothing kept from before it subscribed"


@pytest.mark.slow
def test_nothing_is_stored_across_a_restart(broker, client_factory, np_topic):
    client = client_factory(broker.service_url)
    client.create_producer(np_topic).send(b"gone")
    client.close()
    assert broker.stop() == 0
    broker.restart(same_port=False)
    assert not any("non-persistent" in p.name for p in (broker.data_dir / "ledgers").glob("*")), "no ledger"
    client = client_factory(broker.service_url)
    consumer = client.subscribe(np_topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert_next_is_marker(consumer, client.create_producer(np_topic))  # "gone" would come first


def test_messages_no_consumer_has_permits_for_are_dropped_and_reported(
    broker_factory, client_factory, np_topic
):
    """Pulsar's msgDropRate, in the subscription's and the topic's stats."""
    broker = broker_factory({"stats_update_frequency_seconds": 0.5})
    client = client_factory(broker.service_url)
    # One permit, given back only when the application takes the message.
    consumer = client.subscribe(np_topic, "slow", receiver_queue_size=1)
    producer = client.create_producer(np_topic, batching_enabled=False)
    for i in range(20):
        producer.send(b"%d" % i)
    path = "/admin/v2/non-persistent/" + np_topic.split("://")[1] + "/stats"

    def dropping() -> dict | None:
        status, body = admin_call(broker, "GET", path)
        assert status == 200
        return body if body["subscriptions"]["slow"]["msgDropRate"] > 0 else None

    stats = eventually(dropping, what="a drop rate in the stats")
    assert stats["msgDropRate"] == stats["subscriptions"]["slow"]["msgDropRate"]
    assert consumer.receive(5000).data() == b"0"  # taking it gives the permit back
    producer.send(b"after")
    assert consumer.receive(5000).data() == b"after", "1..19 were dropped, not kept"
