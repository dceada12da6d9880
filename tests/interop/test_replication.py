"""Geo-replication between real broker processes, driven by the official client: what edges
produce arrives at the centre exactly once, in order, whole and marked ``replicated_from``.

This file is about the messages themselves (batches, chunks, their fields, partitions);
test_replication_routing.py is about where they go (a mesh, ``replication_clusters``) and
test_replication_admin.py about stats, metrics and changing the clusters. Each test sets up its
own clusters with ``clusters`` (replication_support.py): one broker process per cluster.
"""

from __future__ import annotations

import hashlib
import os

import pulsar
import pytest

from tests.waiting import eventually

from .replication_support import replicated, replicated_from, replication_stats, topic_path
from .support import admin_call, assert_next_is_marker, receive_n, stored_chunks

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: two or three broker processes a test


def edge_to_centre(clusters, config: dict[str, object] | None = None):
    """An ``edge`` cluster replicating ``public/default`` to a ``central`` one."""
    edge, central = clusters.start("edge", "central", config=config)
    clusters.link("edge", "central")
    clusters.replicate("edge", ["edge", "central"])
    return edge, central


def digest(payloads) -> str:
    return hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in payloads)).hexdigest()


def test_two_edges_feed_the_centre_exactly_once_in_order(clusters, client_factory, topic):
    edge1, edge2, central = clusters.start("edge1", "edge2", "central")
    for edge in ("edge1", "edge2"):
        clusters.link(edge, "central")
        clusters.replicate(edge, [edge, "central"])
    consumer = client_factory(central.service_url).subscribe(topic, "city")
    producers = {
        name: client_factory(broker.service_url).create_producer(topic, producer_name=f"sensor-{name}")
        for name, broker in (("edge1", edge1), ("edge2", edge2))
    }
    for i in range(50):
        for name, producer in producers.items():
            producer.send(f"{name}-{i}".encode(), properties={"i": str(i)}, partition_key=name)

    got = receive_n(consumer, 100, ack=True)
    by_edge = {"edge1": [], "edge2": []}
    for msg in got:
        edge = msg.partition_key()
        by_edge[edge].append(msg.data().decode())
        assert msg.producer_name() == f"sensor-{edge}"
        assert msg.properties()["i"] == msg.data().decode().split("-")[1]
    for edge, values in by_edge.items():
        assert values == [f"{edge}-{i}" for i in range(50)], f"{edge}'s messages out of order or missing"
    for edge in (edge1, edge2):
        stats = replication_stats(edge, topic)["central"]
        assert stats["replicationBacklog"] == 0
        assert stats["connected"] is True
        assert stats["msgOutCount"] == 50


# -- batches and chunks arrive whole ----------------------------------------------------------------------


def test_batches_arrive_whole_exactly_once(clusters, client_factory, topic):
    """The official client's batches are copied as batches: every message once, bytes equal."""
    edge, central = edge_to_centre(clusters)
    consumer = client_factory(central.service_url).subscribe(topic, "city")
    producer = client_factory(edge.service_url).create_producer(
        topic, batching_enabled=True, batching_max_messages=20, batching_max_publish_delay_ms=50
    )
    payloads = [os.urandom(100) + i.to_bytes(4, "big") for i in range(200)]
    for payload in payloads:
        producer.send_async(payload, None)
    producer.flush()

    got = receive_n(consumer, len(payloads), ack=True)
    assert digest(m.data() for m in got) == digest(payloads)
    assert max(m.message_id().batch_index() for m in got) > 0, "the batches were not kept as batches"
    assert_next_is_marker(consumer, producer)  # nothing twice before it
    assert {origin for _, origin in replicated_from(central, topic, len(payloads))} == {"edge"}


def test_chunked_messages_arrive_whole_exactly_once(clusters, client_factory, topic):
    """Chunks are copied chunk by chunk (the same chunks at the centre as at the edge) and the
    centre's consumer puts each message together whole. A small ``max_message_size`` on all
    brokers makes the official client chunk 300 kB values."""
    edge, central = edge_to_centre(clusters, config={"max_message_size": 100_000})
    consumer = client_factory(central.service_url).subscribe(topic, "city")
    producer = client_factory(edge.service_url).create_producer(
        topic, chunking_enabled=True, batching_enabled=False
    )
    payloads = [os.urandom(300_000), b"small", os.urandom(250_000)]
    for payload in payloads:
        producer.send(payload)

    got = receive_n(consumer, len(payloads), timeout_ms=15_000, ack=True)
    assert [hashlib.sha256(m.data()).hexdigest() for m in got] == [
        hashlib.sha256(p).hexdigest() for p in payloads
    ]
    assert_next_is_marker(consumer, producer)
    chunks = stored_chunks(edge, topic)
    assert len(chunks) > len(payloads), "the values were not chunked at the edge"
    assert stored_chunks(central, topic) == chunks
    read = replicated_from(central, topic, len(payloads) + 1)
    assert [hashlib.sha256(data).hexdigest() for data, _ in read[:-1]] == [
        hashlib.sha256(p).hexdigest() for p in payloads
    ]
    assert {origin for _, origin in read} == {"edge"}


# -- what a message carries -------------------------------------------------------------------------------


def fields(msg: pulsar.Message) -> tuple:
    return (
        msg.data(),
        msg.producer_name(),
        msg.partition_key(),
        msg.ordering_key(),
        msg.properties(),
        msg.event_timestamp(),
        msg.publish_timestamp(),
        msg.message_id().batch_index(),  # a batch stays a batch
    )


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_fields_are_kept(clusters, client_factory, topic, batching):
    """Producer name, partition key, ordering key, properties, event time and publish time are
    the same at the centre as at the edge (a batch's messages keep theirs too)."""
    edge, central = edge_to_centre(clusters)
    producer = client_factory(edge.service_url).create_producer(
        topic, producer_name="roadside-7", batching_enabled=batching, batching_max_publish_delay_ms=50
    )
    for i in range(10):
        producer.send_async(
            f"reading-{i}".encode(),
            None,
            properties={"sensor": f"s{i % 3}", "unit": "km/h"},
            partition_key=f"lane-{i % 2}",
            ordering_key=f"order-{i}",
            event_timestamp=1_700_000_000_000 + i,
        )
    producer.flush()
    eventually(lambda: replicated(edge, topic, "central", 10), what="10 messages replicated")

    def read_everything(broker) -> list[tuple]:
        reader = client_factory(broker.service_url).create_reader(topic, pulsar.MessageId.earliest)
        return [fields(reader.read_next(5000)) for _ in range(10)]

    at_edge = read_everything(edge)
    assert at_edge[3] == (
        b"reading-3",
        "roadside-7",
        "lane-1",
        "order-3",
        {"sensor": "s0", "unit": "km/h"},
        1_700_000_000_003,
        at_edge[3][-2],
        at_edge[3][-1],
    )
    assert (max(f[-1] for f in at_edge) > 0) == batching
    assert read_everything(central) == at_edge


# -- partitioned topics -----------------------------------------------------------------------------------


def test_a_partitioned_topic_replicates_partition_by_partition(clusters, client_factory, topic):
    """The replicator creates the partitioned topic at the centre (3 partitions, as at the edge),
    and each message lands in the partition it was stored in at the edge."""
    edge, central = edge_to_centre(clusters)
    status, answer = admin_call(edge, "PUT", f"/admin/v2/{topic_path(topic)}/partitions", 3)
    assert status == 204, (status, answer)
    producer = client_factory(edge.service_url).create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send(f"m{i}".encode(), partition_key=f"key-{i}")
    partitions = [f"{topic}-partition-{index}" for index in range(3)]

    def all_replicated() -> bool:
        sent = [replication_stats(edge, p).get("central", {}) for p in partitions]
        assert sum(s.get("msgOutCount", 0) for s in sent) == 30, sent
        return all(s["replicationBacklog"] == 0 for s in sent)

    eventually(all_replicated, what="30 messages replicated over the 3 partitions")

    status, metadata = admin_call(central, "GET", f"/admin/v2/{topic_path(topic)}/partitions")
    assert (status, metadata["partitions"]) == (200, 3)

    def placement(broker) -> dict[bytes, str]:
        consumer = client_factory(broker.service_url).subscribe(
            topic, "audit", initial_position=pulsar.InitialPosition.Earliest
        )
        return {msg.data(): msg.topic_name() for msg in receive_n(consumer, 30)}

    at_edge = placement(edge)
    assert len(set(at_edge.values())) == 3, "the keys did not spread over the partitions"
    assert placement(central) == at_edge


def test_a_restarted_edge_sends_its_backlog_without_a_client_touching_the_topic(
    clusters, client_factory, topic
):
    """What a topic still owes a remote goes after a restart of the edge: the broker loads the
    topics that replicate, rather than waiting for a client to open each one."""
    edge, central = edge_to_centre(clusters)
    central.stop()
    producer = client_factory(edge.service_url).create_producer(topic)
    for i in range(30):
        producer.send(f"owed-{i}".encode())
    producer.close()
    eventually(lambda: replication_stats(edge, topic)["central"]["replicationBacklog"] == 30)
    edge.stop()
    central.restart()
    consumer = client_factory(central.service_url).subscribe(
        topic, "city", initial_position=pulsar.InitialPosition.Earliest
    )
    edge.restart()  # nothing opens the topic on the edge from here on
    got = receive_n(consumer, 30, timeout_ms=20_000, ack=True)
    assert [m.data() for m in got] == [f"owed-{i}".encode() for i in range(30)]
