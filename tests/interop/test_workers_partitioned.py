"""A partitioned topic's own admin paths, and a namespace's unload, against ``--workers 2``: each
partition's part is done by the worker owning it, whichever worker got the request. Every path is
asked of each worker's own HTTP port, so the one that owns none of some partitions answers too."""

from __future__ import annotations

import uuid

import pulsar
import pytest
from pulsar.exceptions import TopicTerminated

from magnetar.client.admin import AdminClient

from ..waiting import eventually
from .support import receive_n
from .test_workers import WORKERS, binary_lookups, topics_on_two_owners

pytestmark = pytest.mark.interop

PARTITIONS = 4


def spread_topic(broker) -> tuple[str, list[str], list[AdminClient]]:
    """A partitioned topic whose partitions both workers own, its partitions, and an admin client
    on each worker's own HTTP port."""
    admin = AdminClient(broker.http_url)
    while True:
        topic = f"persistent://public/default/fan-{uuid.uuid4().hex[:8]}"
        partitions = [f"{topic}-partition-{i}" for i in range(PARTITIONS)]
        if len({admin.lookups.get_bundle_range(p) for p in partitions}) > 1:
            owners = binary_lookups(broker.service_url, partitions)
            if len(set(owners.values())) == 2:
                break
    admin.topics.create_partitioned_topic(topic, PARTITIONS)
    urls = {admin.lookups.lookup_topic_data(p)["httpUrl"] for p in partitions}
    assert len(urls) == 2, urls
    return topic, partitions, [AdminClient(url) for url in sorted(urls)]


def produce(client, partitions: list[str], count: int) -> dict[str, list]:
    """``count`` messages on each partition, by a producer of its own (kept connected)."""
    ids = {}
    for partition in partitions:
        producer = client.create_producer(partition, batching_enabled=False)
        ids[partition] = [producer.send(b"%d" % i) for i in range(count)]
        ids[partition + "/producer"] = producer
    return ids


def test_partitioned_stats_from_every_worker_cover_every_partition(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    topic, partitions, admins = spread_topic(broker)
    client = client_factory(broker.service_url)
    client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    produce(client, partitions, 5)
    for admin in admins:
        stats = admin.topics.partitioned_stats(topic, per_partition=True)
        assert stats["msgInCounter"] == 5 * PARTITIONS
        assert stats["subscriptions"]["sub"]["msgBacklog"] == 5 * PARTITIONS
        assert len(stats["subscriptions"]["sub"]["consumers"]) == PARTITIONS
        assert {p: s["msgInCounter"] for p, s in stats["partitions"].items()} == dict.fromkeys(partitions, 5)


def test_subscription_paths_act_on_every_partition_where_it_is_owned(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    topic, partitions, (one, other) = spread_topic(broker)
    client = client_factory(broker.service_url)
    produce(client, partitions, 3)

    def backlogs(admin: AdminClient) -> dict[str, int]:
        stats = admin.topics.partitioned_stats(topic, per_partition=True)["partitions"]
        return {
            p: s["subscriptions"]["made"]["msgBacklog"]
            for p, s in stats.items()
            if "made" in s["subscriptions"]
        }

    one.topics.create_subscription(topic, "made", "earliest")
    assert other.topics.get_subscriptions(topic) == ["made"]
    assert backlogs(other) == dict.fromkeys(partitions, 3)
    other.topics.skip_all_messages(topic, "made")
    assert backlogs(one) == dict.fromkeys(partitions, 0)
    one.topics.reset_cursor(topic, "made", 0)
    assert backlogs(other) == dict.fromkeys(partitions, 3)
    other.topics.expire_messages(topic, "made", 0)
    assert backlogs(one) == dict.fromkeys(partitions, 0)
    one.topics.delete_subscription(topic, "made")
    assert other.topics.get_subscriptions(topic) == []
    assert backlogs(one) == {}


def test_terminating_the_partitions_through_either_worker_ends_every_partition(
    broker_factory, client_factory
):
    broker = broker_factory(WORKERS)
    topic, partitions, admins = spread_topic(broker)
    client = client_factory(broker.service_url)
    sent = produce(client, partitions, 2)
    last = admins[0].topics.terminate_partitioned_topic(topic)
    for i, partition in enumerate(partitions):
        expected = sent[partition][-1]
        assert (last[str(i)]["ledgerId"], last[str(i)]["entryId"]) == (
            expected.ledger_id(),
            expected.entry_id(),
        )
        with pytest.raises(TopicTerminated):
            sent[partition + "/producer"].send(b"late")


def test_deleting_a_partitioned_topic_deletes_each_partition_at_its_owner(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    topic, partitions, (one, other) = spread_topic(broker)
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub")
    sent = produce(client, partitions, 2)
    for partition in partitions:
        sent[partition + "/producer"].close()
    consumer.close()
    one.topics.delete_partitioned_topic(topic)
    assert not [t for t in other.topics.get_list("public/default") if t.startswith(topic)]
    one.topics.create_partitioned_topic(topic, PARTITIONS)
    for admin in (one, other):  # nothing of the old topic is left loaded anywhere
        stats = admin.topics.partitioned_stats(topic, per_partition=True)
        assert stats["subscriptions"] == {} and stats["msgInCounter"] == 0, stats


def test_a_namespace_unloaded_through_either_worker_unloads_every_bundle(broker_factory, client_factory):
    """Every bundle's clients are closed and come back: an unacknowledged message is sent again."""
    broker = broker_factory(WORKERS)
    owners = topics_on_two_owners(broker.service_url, "ns-unload")
    topics = list({owner: topic for topic, owner in owners.items()}.values())
    client = client_factory(broker.service_url)
    consumers = [client.subscribe(t, "sub", consumer_type=pulsar.ConsumerType.Shared) for t in topics]
    for topic in topics:
        client.create_producer(topic, batching_enabled=False).send(topic.encode())
    for topic, consumer in zip(topics, consumers, strict=True):
        assert [m.data() for m in receive_n(consumer, 1)] == [topic.encode()]  # not acknowledged
    admin = AdminClient(AdminClient(broker.http_url).lookups.lookup_topic_data(topics[0])["httpUrl"])
    admin.namespaces.unload("public/default")
    for topic, consumer in zip(topics, consumers, strict=True):  # reconnected: sent again
        assert [m.data() for m in receive_n(consumer, 1, timeout_ms=15000)] == [topic.encode()]
    eventually(
        lambda: all(len(admin.topics.stats(t)["subscriptions"]["sub"]["consumers"]) == 1 for t in topics)
    )
