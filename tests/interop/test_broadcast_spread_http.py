"""The spread (docs/architecture.md) for clients that look topics up over HTTP, and a spread topic's
stats, with the official client against ``--workers 2``: Pulsar's HTTP lookup of a spread topic
names the shared service port, so that those clients' broadcast consumers spread over the workers
as binary-lookup ones do, while producers and other consumers still reach the owner; the topic's
stats, partitioned stats and ``/metrics`` count every worker's consumers, not the links."""

from __future__ import annotations

import json
import re
import urllib.request
import uuid

import pulsar
import pytest

from magnetar.client.admin import AdminClient

from ..waiting import eventually
from .support import receive_n
from .test_broadcast import BROADCAST
from .test_broadcast_spread import LINK, REDIRECT, lookup_at, own_ports, owner_stats, served, spread_topic
from .test_workers import WORKERS

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def http_lookup(broker, topic: str) -> dict:
    path = "/lookup/v2/topic/" + topic.replace("://", "/", 1)
    with urllib.request.urlopen(broker.http_url + path, timeout=10) as answer:
        return json.load(answer)


def consumers_by_worker(broker, topic: str) -> dict[str, int]:
    """``pulsar_consumers_count`` of ``topic`` as each worker reports its own part of /metrics."""
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=10) as answer:
        page = answer.read().decode()
    pattern = re.compile(
        r'^pulsar_consumers_count\{[^}]*topic="' + re.escape(topic) + r'"[^}]*worker="([^"]+)"\} (\S+)$', re.M
    )
    return {worker: int(float(value)) for worker, value in pattern.findall(page)}


def subscribe(client: pulsar.Client, topic: str, name: str, subscription: str = "fans") -> pulsar.Consumer:
    return client.subscribe(
        topic,
        subscription,
        consumer_type=pulsar.ConsumerType.Exclusive,
        consumer_name=name,
        properties=BROADCAST,
    )


def test_http_lookup_consumers_spread_over_the_workers_and_producers_reach_the_owner(
    broker_factory, client_factory
):
    broker = broker_factory(WORKERS)
    topic, first = spread_topic(broker, client_factory)
    answer = http_lookup(broker, topic)  # the shared ports, as the binary LOOKUP's Redirect
    assert answer["brokerUrl"] == answer["nativeUrl"] == broker.service_url
    assert answer["httpUrl"] == broker.http_url

    # Broadcast consumers on clients of their own, each on the HTTP service URL, until the
    # workers serve them on both sides (each worker's own count of the topic's consumers).
    consumers = {"first": first}
    while True:
        at_owner, elsewhere = served(broker, topic, "fans")
        if at_owner - {"first"} and elsewhere:
            break
        assert len(consumers) < 40, (at_owner, elsewhere)
        name = f"http-vehicle-{len(consumers)}"
        consumers[name] = subscribe(client_factory(broker.http_url), topic, name)
    counts = consumers_by_worker(broker, topic)
    assert len(counts) == 2 and all(counts.values()), counts
    assert sum(counts.values()) == len(consumers)
    assert counts[owner_stats(broker, topic)["ownerBroker"]] == len(at_owner)  # no link counted

    # Producers and a Shared consumer over HTTP lookups: refused on the follower, they reach the owner.
    shared = client_factory(broker.http_url).subscribe(
        topic, "plain", consumer_type=pulsar.ConsumerType.Shared
    )
    producers = [
        client_factory(broker.http_url).create_producer(topic, batching_enabled=False) for _ in range(6)
    ]
    sent = [f"alert-{i}".encode() for i in range(30)]
    for i, payload in enumerate(sent):
        producers[i % len(producers)].send(payload)
    for name, consumer in consumers.items():
        assert [m.data() for m in receive_n(consumer, len(sent), ack=True)] == sent, name
        with pytest.raises(pulsar.Timeout):
            consumer.receive(200)  # each message once
    assert sorted(m.data() for m in receive_n(shared, len(sent), ack=True)) == sorted(sent)
    stats = owner_stats(broker, topic)
    assert len(stats["publishers"]) == len(producers)  # every producer at the owner
    eventually(lambda: owner_stats(broker, topic)["subscriptions"]["fans"]["msgBacklog"] == 0)


def test_a_spread_topics_stats_list_every_workers_consumers_and_the_slowest_backlog(
    broker_factory, client_factory
):
    broker = broker_factory({**WORKERS, "stats_update_frequency_seconds": 0.5})
    topic, first = spread_topic(broker, client_factory)
    consumers = {"first": first}
    while True:
        at_owner, elsewhere = served(broker, topic, "fans")
        if at_owner - {"first"} and len(elsewhere) > 1:
            break
        assert len(consumers) < 40, (at_owner, elsewhere)
        name = f"vehicle-{len(consumers)}"
        consumers[name] = subscribe(client_factory(broker.service_url), topic, name)
    slow = sorted(elsewhere)[0]  # a follower's consumer that acknowledges nothing
    producer = client_factory(broker.service_url).create_producer(topic, batching_enabled=False)
    for i in range(7):
        producer.send(b"%d" % i)
    unacked = []
    for name, consumer in consumers.items():
        got = receive_n(consumer, 7, ack=name != slow)
        if name == slow:
            unacked = got

    def settled() -> dict:
        stats = owner_stats(broker, topic)["subscriptions"]["fans"]
        listed = {c["consumerName"]: c for c in stats["consumers"]}
        if set(listed) != set(consumers):
            return {}
        unacked = {name: c["unackedMessages"] for name, c in listed.items()}
        done = all(c["msgOutCounter"] == 7 for c in listed.values())
        return stats if done and unacked == {name: 7 if name == slow else 0 for name in consumers} else {}

    fans = eventually(settled, what="every consumer listed with what it was sent")
    assert fans["consumersCount"] == fans["consumersListed"] == len(consumers)
    assert fans["msgOutCounter"] == 7 * len(consumers)  # deliveries to consumers, not to links
    assert owner_stats(broker, topic)["msgOutCounter"] == 7 * len(consumers)  # the topic's too
    assert fans["msgBacklog"] == 7  # the slowest consumer's, on a follower
    for consumer in fans["consumers"]:
        assert consumer["address"].startswith("127.0.0.1:") and not consumer["consumerName"].startswith(LINK)
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/subscriptions"
    with urllib.request.urlopen(broker.http_url + path, timeout=10) as answer:
        assert json.load(answer) == ["fans"]
    # The paged list goes over every worker's consumers too, two at a time.
    page = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/subscription/fans/consumers"
    page += "?offset=0&limit=2"
    paged = []
    while page is not None:
        with urllib.request.urlopen(broker.http_url + page, timeout=10) as answer:
            body = json.load(answer)
        assert body["total"] == len(consumers) and len(body["consumers"]) <= 2
        paged += [(c["consumerName"], c["worker"]) for c in body["consumers"]]
        page = body["next"]
    assert sorted(paged) == sorted((c["consumerName"], c["worker"]) for c in fans["consumers"])
    for message in unacked:  # the slowest catches up: nothing is left behind anywhere
        consumers[slow].acknowledge(message)
    eventually(lambda: owner_stats(broker, topic)["subscriptions"]["fans"]["msgBacklog"] == 0)
    # Rates over the stats interval, of the consumers of every worker, as messages keep coming.
    rated: set[str] = set()
    for _ in range(200):
        producer.send(b"more")
        listed = owner_stats(broker, topic)["subscriptions"]["fans"]["consumers"]
        rated |= {c["worker"] for c in listed if c["msgRateOut"] > 0}
        if len(rated) == 2:
            break
    assert len(rated) == 2, rated


def test_partitioned_stats_of_spread_partitions_list_every_workers_consumers(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    admin = AdminClient(broker.http_url)
    topic = f"persistent://public/default/fleet-{uuid.uuid4().hex[:8]}"
    admin.topics.create_partitioned_topic(topic, 2)
    partitions = [f"{topic}-partition-{i}" for i in range(2)]
    consumers = {"first": subscribe(client_factory(broker.service_url), topic, "first")}
    ports = own_ports(broker).values()
    eventually(
        lambda: all(lookup_at(port, p).response == REDIRECT for port in ports for p in partitions),
        what="every partition spread",
    )

    def workers() -> set[str]:
        subs = admin.topics.partitioned_stats(topic, per_partition=False)["subscriptions"]
        return {c["worker"] for c in subs["fans"]["consumers"]}

    while len(workers()) < 2:
        assert len(consumers) < 40
        name = f"vehicle-{len(consumers)}"
        consumers[name] = subscribe(client_factory(broker.http_url), topic, name)
    fans = admin.topics.partitioned_stats(topic, per_partition=False)["subscriptions"]["fans"]
    assert fans["consumersCount"] == 2 * len(consumers)  # each consumer, on each partition
    names = [c["consumerName"] for c in fans["consumers"]]
    assert sorted(names) == sorted(2 * list(consumers)) and not any(n.startswith(LINK) for n in names)
