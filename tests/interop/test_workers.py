"""``magnetar standalone --workers 2`` with the official client: the supervisor's one
``listening on`` line, LOOKUP answers naming the worker that owns each topic's bundle, producers and
consumers of topics owned by different workers, a partitioned topic spread over both, the one
admin port, a bundle unload, and every kind of subscription on each worker."""

from __future__ import annotations

import asyncio
import re
import uuid

import pulsar
import pytest

from magnetar.client.admin import AdminClient
from magnetar.client.client import Client
from magnetar.protocol import pulsar_wire_pb2 as wire

from .support import receive_n
from .test_broadcast import BROADCAST

pytestmark = pytest.mark.interop

WORKERS = {"workers": 2}


def binary_lookups(service_url: str, topics: list[str]) -> dict[str, str]:
    """Each topic's owner as a LOOKUP on the binary protocol answers it (our client's lookup)."""

    async def ask() -> dict[str, str]:
        async with Client(service_url) as client:
            return {topic: (await client.lookup(topic))[0] for topic in topics}

    return asyncio.run(ask())


def topics_on_two_owners(service_url: str, prefix: str, domain: str = "persistent") -> dict[str, str]:
    """Topics and their owners, enough for two owners (4 bundles over 2 workers: a few names do)."""
    topics = [f"{domain}://public/default/{prefix}-{i}-{uuid.uuid4().hex[:6]}" for i in range(12)]
    owners = binary_lookups(service_url, topics)
    assert len(set(owners.values())) == 2, owners
    return owners


def test_topics_owned_by_each_worker_are_served_by_their_owners(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    owners = topics_on_two_owners(broker.service_url, "owned")
    # Each LOOKUP names a worker's own port, never the shared one, and the HTTP lookup agrees.
    assert broker.service_url not in owners.values()
    admin = AdminClient(broker.http_url)
    for topic, owner in owners.items():
        assert admin.lookups.lookup_topic(topic) == owner
    first = {owner: topic for topic, owner in owners.items()}  # one topic per owner
    client = client_factory(broker.service_url)
    for owner, topic in first.items():
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "sub")
        for i in range(10):
            producer.send(f"{owner}-{i}".encode())
        got = [m.data().decode() for m in receive_n(consumer, 10, ack=True)]
        assert got == [f"{owner}-{i}" for i in range(10)]
    assert "(2 workers)" in broker.log_tail()


def test_a_partitioned_topics_partitions_live_on_both_workers(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    admin = AdminClient(broker.http_url)
    while True:  # a name whose partitions fall in more than one bundle (each bundle's owner differs)
        topic = f"persistent://public/default/spread-{uuid.uuid4().hex[:8]}"
        partitions = [f"{topic}-partition-{i}" for i in range(4)]
        if len({admin.lookups.get_bundle_range(p) for p in partitions}) > 1:
            break
    admin.topics.create_partitioned_topic(topic, 4)
    owners = binary_lookups(broker.service_url, partitions)
    assert len(set(owners.values())) == 2, owners
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    round_robin = pulsar.PartitionsRoutingMode.RoundRobinDistribution
    producer = client.create_producer(topic, batching_enabled=False, message_routing_mode=round_robin)
    sent = {f"m-{i}".encode() for i in range(40)}
    for payload in sorted(sent):
        producer.send(payload)
    received = receive_n(consumer, 40, ack=True)
    assert {m.data() for m in received} == sent
    assert {m.topic_name() for m in received} == set(partitions)


def test_the_one_admin_port_serves_the_topics_of_each_worker(broker_factory, client_factory):
    """Every worker listens on the admin port: whichever gets a request about a topic another
    worker owns proxies it there, so stats and subscription paths answer alike for every topic."""
    broker = broker_factory(WORKERS)
    owners = topics_on_two_owners(broker.service_url, "admin")
    client = client_factory(broker.service_url)
    admin = AdminClient(broker.http_url)
    for topic in {owner: topic for topic, owner in owners.items()}.values():
        producer = client.create_producer(topic, batching_enabled=False)
        client.subscribe(topic, "live")
        for i in range(3):
            producer.send(b"%d" % i)
        admin.topics.create_subscription(topic, "made-by-admin", "earliest")
        for _ in range(6):  # the kernel spreads these over both workers
            stats = admin.topics.stats(topic)
            assert len(stats["publishers"]) == 1 and stats["msgInCounter"] == 3
            assert set(stats["subscriptions"]) == {"live", "made-by-admin"}
            assert stats["subscriptions"]["made-by-admin"]["msgBacklog"] == 3
        admin.topics.delete_subscription(topic, "made-by-admin")
        assert set(admin.topics.stats(topic)["subscriptions"]) == {"live"}


def test_a_bundle_unloaded_through_any_worker_moves_its_clients_and_loses_nothing(
    broker_factory, client_factory
):
    broker = broker_factory(WORKERS)
    topic = next(iter(topics_on_two_owners(broker.service_url, "unload")))
    admin = AdminClient(broker.http_url)
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    for i in range(20):
        producer.send(f"before-{i}".encode())
    admin.namespaces.unload_namespace_bundle("public/default", admin.lookups.get_bundle_range(topic))
    for i in range(20):  # the producer looks up and reconnects by itself
        producer.send(f"after-{i}".encode())
    got = [m.data().decode() for m in receive_n(consumer, 40, timeout_ms=15000, ack=True)]
    assert sorted(got) == sorted([f"before-{i}" for i in range(20)] + [f"after-{i}" for i in range(20)])
    stats = admin.topics.stats(topic)
    assert len(stats["publishers"]) == 1 and len(stats["subscriptions"]["sub"]["consumers"]) == 1


@pytest.mark.parametrize(
    "kind", ["Exclusive", "Failover", "Shared", "KeyShared", "Broadcast", "Chunked"], ids=str.lower
)
def test_every_kind_of_subscription_on_the_topics_of_both_workers(broker_factory, client_factory, kind):
    broker = broker_factory({**WORKERS, "max_message_size": 4096})  # larger messages go in chunks
    owners = topics_on_two_owners(broker.service_url, kind.lower())
    client = client_factory(broker.service_url)
    consumer_type = getattr(pulsar.ConsumerType, kind if kind in dir(pulsar.ConsumerType) else "Shared")
    for topic in {owner: topic for topic, owner in owners.items()}.values():
        options = {"properties": BROADCAST} if kind == "Broadcast" else {}
        consumers = [
            client.subscribe(topic, "sub", consumer_type=consumer_type, consumer_name=f"c{i}", **options)
            for i in range(2 if kind == "Broadcast" else 1)
        ]
        chunked = kind == "Chunked"
        producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=chunked)
        sent = [(f"{i}-".encode() * (3000 if chunked else 1)) for i in range(10)]
        for i, payload in enumerate(sent):
            producer.send(payload, partition_key=f"key-{i % 3}")
        for consumer in consumers:  # a broadcast subscription: every consumer every message
            got = [m.data() for m in receive_n(consumer, len(sent), ack=True)]
            assert got == sent if kind != "KeyShared" else sorted(got) == sorted(sent)


def listed_by_each_connection(service_url: str, namespace: str, mode: int, times: int) -> list[set[str]]:
    """GET_TOPICS_OF_NAMESPACE on ``times`` new connections to the shared port (the kernel spreads
    them over the workers): each answer's topics."""

    async def ask() -> list[set[str]]:
        answers = []
        for _ in range(times):
            async with Client(service_url) as client:
                answers.append(set((await client.get_topics_of_namespace(namespace, mode)).topics))
        return answers

    return asyncio.run(ask())


def test_non_persistent_topics_of_each_worker_are_listed_by_every_worker(broker_factory, client_factory):
    """A non-persistent topic exists only where it is loaded, on its owner; every worker lists
    those of the others too (the admin list, GET_TOPICS_OF_NAMESPACE, a pattern subscription)."""
    broker = broker_factory(WORKERS)
    owners = topics_on_two_owners(broker.service_url, "np", "non-persistent")
    topics = sorted({owner: topic for topic, owner in owners.items()}.values())
    client = client_factory(broker.service_url)
    producers = [client.create_producer(topic, batching_enabled=False) for topic in topics]  # loads them
    admin = AdminClient(broker.http_url)
    for _ in range(6):  # the kernel spreads these over both workers
        assert set(topics) <= set(admin.topics.get_list("public/default", "non-persistent"))
    non_persistent = wire.CommandGetTopicsOfNamespace.NON_PERSISTENT
    for listed in listed_by_each_connection(broker.service_url, "public/default", non_persistent, 6):
        assert set(topics) <= listed
    pattern = re.compile(r"public/default/np-.*")  # the mode below names the domain
    consumer = client.subscribe(
        pattern, "sub", regex_subscription_mode=pulsar.RegexSubscriptionMode.NonPersistentOnly
    )
    for producer, topic in zip(producers, topics, strict=True):
        producer.send(topic.encode())
    assert sorted(m.data().decode() for m in receive_n(consumer, 2, ack=True)) == topics
    producers[0].close()
    consumer.close()
    admin.topics.delete(topics[0])  # gone from its owner, and from every worker's list
    for _ in range(6):
        assert topics[0] not in admin.topics.get_list("public/default", "non-persistent")
