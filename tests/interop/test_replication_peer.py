"""Geo-replication into ``pulsar-lite`` (the peer, a Rust broker speaking the Pulsar protocol) as
the remote cluster: what it does with what a Magnetar edge's replicator sends.

pulsar-lite has no admin API, so it is registered on the edge with its broker URL and an HTTP
``serviceUrl`` that nobody serves (the admin API insists on one, as Pulsar's does). What it does:

- it stores what the replicator sends and hands it to the official client whole and in order:
  plain messages, batches and chunked messages, with producer name, key, ordering key,
  properties, event time, publish time and ``replicated_from`` as they were;
- it does **not** deduplicate by producer name and sequence id, so a resend after the edge is
  killed is stored again: into pulsar-lite replication is at least once, not exactly once;
- a consumer subscribed while messages arrive may get some of them more than once (pulsar-lite's
  dispatch, with its own producer as much as with the replicator), and so, now and then, may a
  reader of what it stored (the same message id twice: seen in 1 run of 25 with 2,000 messages),
  so these tests read what it stored, after the edge's replication backlog drained, once per id;
- a partitioned topic needs the remote's admin API (the replicator creates the partitioned
  topic there first): without one its partitions are held at the edge, never sent as topics of
  their own, and their backlog stays.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from bench.brokers import PEER, SPECS, make_process
from bench.procs import BrokerProcess as PeerProcess
from magnetar.client import Client as MagnetarClient

from ..waiting import eventually
from .replication_support import replication_stats
from .support import admin_call

pytestmark = pytest.mark.interop

#: A port with nothing listening: pulsar-lite's "admin URL".
NO_ADMIN_URL = "http://127.0.0.1:9"


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[PeerProcess]:
    """pulsar-lite on a free port, stopped (by PID) at teardown."""
    process = make_process(SPECS[PEER], tmp_path / "pulsar-lite", source=None).start()  # type: ignore[arg-type]
    try:
        yield process
    finally:
        process.stop()


def edge_replicating_to(clusters, peer: PeerProcess, config: dict[str, object] | None = None):
    """A Magnetar edge whose public/default replicates to pulsar-lite as cluster ``central``."""
    (edge,) = clusters.start("edge", config=config)
    clusters.link("edge", "central", data={"serviceUrl": NO_ADMIN_URL, "brokerServiceUrl": peer.service_url})
    clusters.replicate("edge", ["edge", "central"])
    return edge


def stored_at(client, topic: str) -> list:
    """Every message ``topic`` holds, from the first, each once (``client``: official or
    Magnetar's): pulsar-lite's reader may hand one message id out twice."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = {}
    while reader.has_message_available():
        message = reader.read_next(10_000)
        out.setdefault(str(message.message_id()), message)
    reader.close()
    return list(out.values())


def drained(edge, topic: str, messages: int) -> dict:
    """The edge's replication stats to pulsar-lite once ``messages`` went out and none wait."""

    def check() -> dict:
        stats = replication_stats(edge, topic)["central"]
        assert stats.get("msgOutCount") == messages and stats["replicationBacklog"] == 0, stats
        return stats

    return eventually(check, what=f"{messages} messages replicated")


def test_what_an_edge_produces_arrives_at_pulsar_lite_whole_in_order_with_its_metadata(
    clusters, peer, client_factory, topic
):
    edge = edge_replicating_to(clusters, peer, {"max_message_size": 100_000})
    edge_client = client_factory(edge.service_url)
    plain = edge_client.create_producer(topic, producer_name="plain", batching_enabled=False)
    for i in range(20):
        plain.send(
            f"plain-{i}".encode(),
            properties={"i": str(i)},
            partition_key=f"k{i % 3}",
            ordering_key="ok",
            event_timestamp=1_000 + i,
        )
    batched = edge_client.create_producer(
        topic,
        producer_name="batched",
        batching_enabled=True,
        batching_max_messages=10,
        batching_max_publish_delay_ms=50,
    )
    for i in range(30):
        batched.send_async(f"batched-{i}".encode(), None, properties={"i": str(i)})
    batched.flush()
    chunked = edge_client.create_producer(
        topic, producer_name="chunked", batching_enabled=False, chunking_enabled=True
    )
    blobs = [os.urandom(250_000) for _ in range(2)]  # 3 chunks each at the edge's 100 KB
    for blob in blobs:
        chunked.send(blob)
    stats = drained(edge, topic, 20 + 30 + 2 * 3)  # each chunk counts, as each is one entry
    assert stats["connected"] is True

    local = {m.data(): m for m in stored_at(edge_client, topic)}
    got = stored_at(client_factory(peer.service_url), topic)
    by_producer: dict[str, list[bytes]] = {}
    for msg in got:
        by_producer.setdefault(msg.producer_name(), []).append(msg.data())
        original = local[msg.data()]
        assert msg.properties() == original.properties()
        assert msg.partition_key() == original.partition_key()
        assert msg.ordering_key() == original.ordering_key()
        assert msg.event_timestamp() == original.event_timestamp()
        assert msg.publish_timestamp() == original.publish_timestamp()
    assert by_producer == {
        "plain": [f"plain-{i}".encode() for i in range(20)],
        "batched": [f"batched-{i}".encode() for i in range(30)],
        "chunked": blobs,
    }
    # Batches stay batches: pulsar-lite's message ids carry batch indexes for them.
    assert any(m.message_id().batch_index() >= 0 for m in got if m.producer_name() == "batched")
    # The official Python client does not show replicated_from; Magnetar's client does.
    ours = MagnetarClient(peer.service_url, operation_timeout_seconds=10)
    try:
        assert {m.replicated_from() for m in stored_at(ours, topic)} == {"edge"}
    finally:
        ours.close()


def test_pulsar_lite_does_not_deduplicate_by_producer_name_and_sequence_id(peer, client_factory, topic):
    """What the replicator's exactly once rests on, and pulsar-lite does not do."""
    client = client_factory(peer.service_url)
    producer = client.create_producer(
        topic, producer_name="magnetar.repl.edge-->central", batching_enabled=False
    )
    for sequence_id in range(3):
        producer.send(f"first-{sequence_id}".encode(), sequence_id=sequence_id)
    producer.close()
    again = client.create_producer(
        topic, producer_name="magnetar.repl.edge-->central", batching_enabled=False
    )
    assert again.last_sequence_id() == -1  # Pulsar with deduplication answers 2 here
    for sequence_id in range(1, 4):
        again.send(f"again-{sequence_id}".encode(), sequence_id=sequence_id)
    got = [m.data().decode() for m in stored_at(client, topic)]
    assert got == ["first-0", "first-1", "first-2", "again-1", "again-2", "again-3"]


@pytest.mark.slow
def test_an_edge_killed_mid_stream_resends_and_pulsar_lite_keeps_the_duplicates(
    clusters, peer, client_factory, topic
):
    # The edge flushes no cursor by time: after the kill it replays from the start of the topic,
    # so what pulsar-lite had before it is sent again.
    edge = edge_replicating_to(clusters, peer, {"cursor_flush_interval_seconds": 3600.0})
    at_peer = client_factory(peer.service_url)
    producer = client_factory(edge.service_url).create_producer(
        topic, producer_name="sensor", batching_enabled=False, max_pending_messages=2000
    )
    count = 2000
    for i in range(count):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()  # all stored at the edge
    at_peer.create_reader(topic, pulsar.MessageId.earliest).read_next(10_000)  # replication under way
    edge.kill9()
    edge.start()
    eventually(lambda: replication_stats(edge, topic)["central"]["replicationBacklog"] == 0)
    client_factory(edge.service_url).create_producer(topic, producer_name="after").send(b"m-end")
    eventually(lambda: replication_stats(edge, topic)["central"]["replicationBacklog"] == 0)

    values = [m.data().decode() for m in stored_at(at_peer, topic)]
    assert values[-1] == "m-end"
    sent = [f"m{i}" for i in range(count)] + ["m-end"]
    # At least once, in order of first arrival: nothing lost, nothing out of order ...
    assert list(dict.fromkeys(values)) == sent, "a message lost or out of order"
    # ... but what was sent again is stored again: pulsar-lite does not deduplicate (a Magnetar
    # centre drops these, test_replication_faults.py). Each resend is a run of the stream again.
    assert len(values) > len(sent) and values[0] == "m0" and values.count("m0") >= 2


def test_a_partitioned_topic_is_held_at_the_edge_without_the_remotes_admin_api(
    clusters, peer, client_factory
):
    edge = edge_replicating_to(clusters, peer)
    base = "persistent://public/default/parted"
    status, answer = admin_call(edge, "PUT", "/admin/v2/persistent/public/default/parted/partitions", 2)
    assert status == 204, (status, answer)
    producer = client_factory(edge.service_url).create_producer(base, producer_name="sensor")
    for i in range(4):
        producer.send(f"p{i}".encode(), partition_key=str(i))

    def held(partition: int) -> dict:
        stats = replication_stats(edge, f"{base}-partition-{partition}")["central"]
        assert "Connection refused" in stats.get("lastError", ""), stats
        return stats

    for partition in range(2):
        stats = eventually(
            lambda partition=partition: held(partition), what="the replicator says the admin URL refused"
        )
        assert stats["replicationBacklog"] > 0
        assert stats["msgOutCount"] == 0
