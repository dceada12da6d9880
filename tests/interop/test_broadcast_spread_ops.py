"""SEEK and UNSUBSCRIBE of a spread topic's broadcast consumers, with the official client against
``--workers 2`` (docs/architecture.md, the spread): a consumer a follower serves asks them as one
at the owner would, the follower asking the owner through its link; a seek, wherever it is asked,
starts every consumer of every worker over at the new place; an unsubscribe deletes the
subscription when its consumer is the only one connected, on any worker."""

from __future__ import annotations

import time
import urllib.request

import pulsar
import pytest

from ..waiting import eventually
from .support import receive_n
from .test_broadcast import BROADCAST
from .test_broadcast_spread import owner_stats, served, spread_topic
from .test_workers import WORKERS

pytestmark = pytest.mark.interop

EARLIEST = pulsar.InitialPosition.Earliest


def on_a_follower(broker, client_factory, topic: str, subscription: str, name: str, initial=EARLIEST):
    """A broadcast consumer ``name`` of ``subscription`` whose connection (a client of its own)
    reached a worker other than the topic's owner (the topic's stats name the worker serving it).
    Those that reached the owner are closed, and another client tries."""
    for _ in range(40):
        consumer = client_factory(broker.service_url).subscribe(
            topic,
            subscription,
            consumer_type=pulsar.ConsumerType.Exclusive,
            consumer_name=name,
            properties=BROADCAST,
            initial_position=initial,
        )
        if name in served(broker, topic, subscription)[1]:
            return consumer
        consumer.close()
    raise AssertionError(f"no connection of 40 reached a follower of {topic}")


def backlog(broker, topic: str, subscription: str = "fans") -> int:
    return owner_stats(broker, topic)["subscriptions"][subscription]["msgBacklog"]


@pytest.mark.slow
def test_a_seek_asked_on_any_worker_starts_every_consumer_of_every_worker_over(
    broker_factory, client_factory
):
    broker = broker_factory(WORKERS)
    topic, first = spread_topic(broker, client_factory)  # at the owner
    there = on_a_follower(broker, client_factory, topic, "fans", "vehicle")
    producer = client_factory(broker.service_url).create_producer(topic, batching_enabled=False)
    sent = []
    for i in range(8):
        sent.append(f"alert-{i}".encode())
        producer.send(sent[-1])
        if i == 4:  # a time between alert-4's and alert-5's, in milliseconds: the pauses are the behaviour
            time.sleep(0.05)
            middle_time = int(time.time() * 1000)
            time.sleep(0.05)
    for consumer in (first, there):
        assert [m.data() for m in receive_n(consumer, len(sent), ack=True)] == sent
    eventually(lambda: backlog(broker, topic) == 0, what="everything acknowledged on both workers")

    # Asked by the follower's consumer: the owner resets the subscription; both start over.
    # (A consumer the seek closed may come back on the other worker: its former one keeps its
    # place, at the new position, for its reconnect grace; so the backlog is not asserted here.)
    there.seek(pulsar.MessageId.earliest)
    for consumer in (first, there):
        assert [m.data() for m in receive_n(consumer, len(sent), ack=True, timeout_ms=10_000)] == sent
        with pytest.raises(pulsar.Timeout):
            consumer.receive(200)  # each once

    # Done by the owner (the admin API's reset, by time): the follower's link finds the reset
    # and the follower's consumers start over too.
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    reset = urllib.request.Request(
        f"{broker.http_url}{path}/subscription/fans/resetcursor/{middle_time}", method="POST"
    )
    with urllib.request.urlopen(reset, timeout=10) as answer:
        assert answer.status == 204
    for consumer in (first, there):
        again = [m.data() for m in receive_n(consumer, 3, ack=True, timeout_ms=10_000)]
        assert again == sent[5:]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(200)  # each once

    # A seek the owner refuses is refused to the follower's consumer, which keeps working.
    other = client_factory(broker.service_url).create_producer(topic + "-other")
    for _ in range(3):
        other.send(b"x")
    with pytest.raises(pulsar.PulsarException):
        there.seek(other.send(b"y"))  # a ledger this topic never had
    producer.send(b"after")
    assert there.receive(10_000).data() == b"after"


@pytest.mark.slow
def test_an_unsubscribe_asked_on_a_follower_deletes_the_subscription_when_its_consumer_is_alone(
    broker_factory, client_factory
):
    broker = broker_factory(WORKERS)
    topic, at_owner = spread_topic(broker, client_factory)
    producer = client_factory(broker.service_url).create_producer(topic, batching_enabled=False)

    # "fans" has a consumer at the owner too: refused, as the owner refuses it while another is connected.
    busy = on_a_follower(broker, client_factory, topic, "fans", "busy")
    with pytest.raises(pulsar.ConsumerBusy):
        busy.unsubscribe()
    producer.send(b"still")
    for consumer in (busy, at_owner):
        assert consumer.receive(10_000).data() == b"still"

    # "solo" has one consumer, on the follower: the owner deletes the subscription.
    alone = on_a_follower(broker, client_factory, topic, "solo", "alone", pulsar.InitialPosition.Latest)
    for i in range(3):
        producer.send(f"unread-{i}".encode())
    eventually(lambda: backlog(broker, topic, "solo") == 3, what="the backlog at the owner")
    alone.unsubscribe()
    eventually(
        lambda: "solo" not in owner_stats(broker, topic)["subscriptions"], what="the subscription deleted"
    )
    # A new "solo" starts where a new subscription does: what the deleted one had left is gone.
    again = on_a_follower(broker, client_factory, topic, "solo", "again", pulsar.InitialPosition.Latest)
    producer.send(b"new")
    assert again.receive(10_000).data() == b"new"
    with pytest.raises(pulsar.Timeout):
        again.receive(200)


@pytest.mark.slow
def test_an_unsubscribe_goes_through_at_once_past_a_follower_whose_consumers_left(
    broker_factory, client_factory
):
    """A follower keeps its link for ``spread.IDLE_LINGER_S`` after its last consumer left; an
    UNSUBSCRIBE with no consumer connected anywhere else is not held back by it: the owner closes
    the idle link, the follower lets the subscription go, and the subscription is deleted."""
    broker = broker_factory(WORKERS)
    topic, at_owner = spread_topic(broker, client_factory)
    producer = client_factory(broker.service_url).create_producer(topic, batching_enabled=False)
    there = on_a_follower(broker, client_factory, topic, "fans", "vehicle")

    # While the follower's consumer is connected, it holds the subscription: refused.
    with pytest.raises(pulsar.ConsumerBusy):
        at_owner.unsubscribe()
    producer.send(b"still")
    for consumer in (there, at_owner):
        assert consumer.receive(10_000).data() == b"still"

    # Its consumer gone, the follower's link lingers (a virtual cursor at the owner besides its
    # own consumer's, though the stats list no consumer elsewhere) but holds nothing back.
    there.close()
    eventually(lambda: served(broker, topic, "fans") == ({"first"}, set()))
    assert owner_stats(broker, topic)["subscriptions"]["fans"]["dispatcher"]["virtualCursors"] == 2
    at_owner.unsubscribe()
    assert "fans" not in owner_stats(broker, topic)["subscriptions"]
    for i in range(3):
        producer.send(f"unread-{i}".encode())
    # A new "fans", on either worker, starts where a new subscription does.
    again = on_a_follower(broker, client_factory, topic, "fans", "again", pulsar.InitialPosition.Latest)
    producer.send(b"new")
    assert again.receive(10_000).data() == b"new"
    with pytest.raises(pulsar.Timeout):
        again.receive(200)
