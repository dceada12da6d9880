"""Limits a public broker needs (docs/configuration.md, Limits), with the official client.

For each limit: the one past it is refused with Pulsar's error (the official client raises its
exception), those admitted keep working, /metrics counts the refusal, and once one goes a new
one is admitted.
"""

from __future__ import annotations

import uuid

import pulsar
import pytest

from magnetar import client as ours
from magnetar.protocol import wire

from ..waiting import eventually
from .conftest import CLIENT_LOGGER
from .support import RawConnection, admin_call, labelled, receive_n, receive_spread

pytestmark = pytest.mark.interop

BASE = wire.BaseCommand


def refusals(broker) -> dict[str, float]:
    return labelled(broker, "magnetar_limit_refusals_total", "limit")


def once_admitted(action, refusal: type[Exception] = pulsar.PulsarException):
    """``action()``'s result once the broker admits it: it sees a close a moment after the client,
    and refuses (``refusal``) until then."""

    def attempt():
        try:
            return action()
        except refusal as exc:
            raise AssertionError(f"still refused: {exc!r}") from None

    return eventually(attempt, what="admitted once there is room")


def works(producer, consumer, payload: bytes) -> None:
    producer.send(payload)
    assert receive_n(consumer, 1, ack=True)[0].data() == payload


def test_a_producer_past_max_producers_per_topic_gets_producer_busy(broker_factory, client_factory, topic):
    broker = broker_factory({"max_producers_per_topic": 2})
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "s")
    first, second = client.create_producer(topic), client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    works(first, consumer, b"first")
    works(second, consumer, b"second")
    client.create_producer(f"{topic}-other")  # another topic has its own count
    assert refusals(broker)["max_producers_per_topic"] == 1
    second.close()
    works(client.create_producer(topic), consumer, b"third")
    assert "max_producers_per_topic reached: refused a producer on" in broker.log_text()


def test_a_namespace_policy_sets_max_producers_per_topic_through_the_admin_api(broker, client, topic):
    path = "/admin/v2/namespaces/public/default/maxProducersPerTopic"
    assert admin_call(broker, "GET", path) == (204, None)
    assert admin_call(broker, "POST", path, 1)[0] == 204
    assert admin_call(broker, "GET", path) == (200, 1)
    assert admin_call(broker, "GET", "/admin/v2/namespaces/public/default")[1]["max_producers_per_topic"] == 1
    assert admin_call(broker, "POST", path, -1)[0] == 400
    client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    assert admin_call(broker, "DELETE", path)[0] == 204
    client.create_producer(topic)  # the broker's setting again: no limit

    per_subscription = "/admin/v2/namespaces/public/default/maxConsumersPerSubscription"
    assert admin_call(broker, "POST", per_subscription, 1)[0] == 204
    client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    per_topic = "/admin/v2/namespaces/public/default/maxConsumersPerTopic"
    assert admin_call(broker, "POST", per_topic, 1)[0] == 204
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "other")


def test_an_auto_created_partitioned_topic_whose_partitions_do_not_fit_is_not_allowed(
    broker_factory, client_factory, topic
):
    broker = broker_factory(
        {
            "max_topics_per_namespace": 4,
            "auto_topic_creation_type": "partitioned",
            "default_num_partitions": 3,
        }
    )
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic)  # 3 partitions of 4
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer(f"{topic}-more")  # 3 more do not fit
    producer.send(b"still")
    more = f"/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}-more/partitions"
    assert admin_call(broker, "GET", more)[1] == {"partitions": 0}  # nothing was created
    assert refusals(broker)["max_topics_per_namespace"] == 1


def test_a_producer_past_max_producers_per_connection_gets_producer_busy(
    broker_factory, client_factory, topic
):
    broker = broker_factory({"max_producers_per_connection": 2})
    client = client_factory(broker.service_url)  # one connection for all its producers
    producers = [client.create_producer(f"{topic}-{i}") for i in range(2)]
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(f"{topic}-2")
    other = client_factory(broker.service_url)  # another connection has its own count
    consumer = other.subscribe(f"{topic}-0", "s")
    other.create_producer(f"{topic}-2")
    works(producers[0], consumer, b"still")
    assert refusals(broker)["max_producers_per_connection"] == 1
    producers[1].close()
    client.create_producer(f"{topic}-2")


def test_a_consumer_past_max_consumers_per_topic_gets_consumer_busy(broker_factory, client_factory, topic):
    broker = broker_factory({"max_consumers_per_topic": 2})
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic)
    first = client.subscribe(topic, "a")
    second = client.subscribe(topic, "b")  # all subscriptions together
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "c")
    works(producer, first, b"one")
    assert receive_n(second, 1, ack=True)[0].data() == b"one"
    assert refusals(broker)["max_consumers_per_topic"] == 1
    second.close()
    third = once_admitted(lambda: client.subscribe(topic, "c"), pulsar.ConsumerBusy)
    works(producer, third, b"two")


def test_a_consumer_past_max_consumers_per_subscription_gets_consumer_busy(
    broker_factory, client_factory, topic
):
    broker = broker_factory({"max_consumers_per_subscription": 2})
    client = client_factory(broker.service_url)
    shared = pulsar.ConsumerType.Shared
    consumers = [client.subscribe(topic, "s", consumer_type=shared) for _ in range(2)]
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=shared)
    other = client.subscribe(topic, "other")  # another subscription has its own count
    producer = client.create_producer(topic)
    producer.send(b"m")
    assert receive_n(other, 1, ack=True)[0].data() == b"m"
    got = [data for received in receive_spread(consumers, producer, expected=1) for data in received]
    assert got == [b"m"]
    assert refusals(broker)["max_consumers_per_subscription"] == 1
    consumers[0].close()
    once_admitted(lambda: client.subscribe(topic, "s", consumer_type=shared), pulsar.ConsumerBusy)


def test_a_consumer_past_max_consumers_per_connection_gets_consumer_busy(
    broker_factory, client_factory, topic
):
    broker = broker_factory({"max_consumers_per_connection": 1})
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "a")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(f"{topic}-other", "a")
    works(client_factory(broker.service_url).create_producer(topic), consumer, b"m")
    assert refusals(broker)["max_consumers_per_connection"] == 1
    consumer.close()
    once_admitted(lambda: client.subscribe(f"{topic}-other", "a"), pulsar.ConsumerBusy)


def test_a_topic_past_max_topics_per_namespace_is_not_allowed(broker_factory, client_factory):
    broker = broker_factory({"max_topics_per_namespace": 2})
    client = client_factory(broker.service_url)
    base = f"persistent://public/default/limited-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(f"{base}-0", "s")
    producers = [client.create_producer(f"{base}-{i}") for i in range(2)]
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer(f"{base}-2")
    with pytest.raises(pulsar.NotAllowedError):
        client.subscribe(f"{base}-3", "s")
    status, body = admin_call(broker, "PUT", f"/admin/v2/persistent/public/default/limited-{base[-8:]}-4")
    assert status == 412 and "Exceed maximum number of topics in namespace" in body["reason"]
    status, body = admin_call(broker, "PUT", "/admin/v2/persistent/public/default/limited-p/partitions", 2)
    assert status == 412
    works(producers[0], consumer, b"still")
    assert refusals(broker)["max_topics_per_namespace"] == 4
    # Other namespaces have their own count, and a namespace may set its own limit.
    assert admin_call(broker, "PUT", "/admin/v2/namespaces/public/other")[0] == 204
    assert admin_call(broker, "POST", "/admin/v2/namespaces/public/other/maxTopicsPerNamespace", 1)[0] == 204
    client.create_producer("persistent://public/other/one")
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer("persistent://public/other/two")
    # A topic deleted makes room for a new one.
    producers[1].close()
    assert (
        admin_call(broker, "DELETE", f"/admin/v2/persistent/public/default/{base.rsplit('/', 1)[1]}-1")[0]
        == 204
    )
    client.create_producer(f"{base}-2")


@pytest.mark.slow
def test_a_connection_past_broker_max_connections_per_ip_is_refused(broker_factory, client_factory, topic):
    broker = broker_factory({"broker_max_connections_per_ip": 2})
    first = client_factory(broker.service_url)
    consumer = first.subscribe(topic, "s")
    second = client_factory(broker.service_url)
    producer = second.create_producer(topic)

    # Refused at once, as Pulsar does: ERROR NotAllowedError before anything else, then closed.
    raw = RawConnection(broker.port)
    frames = raw.expect_closed()
    raw.close()
    assert [f.type for f in frames] == [BASE.ERROR]
    assert frames[0].body().error == wire.NotAllowedError
    assert "Reached the maximum number of connections on address 127.0.0.1" in frames[0].body().message
    # The official client sees the connection closed and retries until its operation timeout.
    third = pulsar.Client(broker.service_url, operation_timeout_seconds=2, logger=CLIENT_LOGGER)
    try:
        with pytest.raises(pulsar.Timeout):
            third.create_producer(topic)
        # Ours reads the broker's answer.
        with (
            ours.Client(broker.service_url, operation_timeout_seconds=2) as mine,
            pytest.raises(ours.ClientError, match=r"NotAllowedError.*maximum number of connections"),
        ):
            mine.create_producer(topic)
        works(producer, consumer, b"unaffected")
        assert refusals(broker)["broker_max_connections_per_ip"] >= 3
        second.close()
        once_admitted(lambda: third.create_producer(topic))
    finally:
        third.close()


def test_a_connection_past_broker_max_connections_is_refused(broker_factory):
    broker = broker_factory({"broker_max_connections": 1})
    first = RawConnection(broker.port)
    first.handshake()
    refused = RawConnection(broker.port)
    frames = refused.expect_closed()
    refused.close()
    assert frames and frames[0].body().error == wire.NotAllowedError
    assert "Reached the maximum number of connections" in frames[0].body().message
    first.send_command(wire.CommandPing())
    assert first.expect(BASE.PONG)
    assert refusals(broker)["broker_max_connections"] == 1
    first.close()

    def admitted() -> bool:
        raw = RawConnection(broker.port)  # refused: expect() fails (AssertionError), closed or ERROR
        try:
            raw.handshake()
        finally:
            raw.close()
        return True

    eventually(admitted, what="a connection admitted once the first went")
