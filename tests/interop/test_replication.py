"""Geo-replication between real broker processes, driven by the official client: what edges
produce arrives at the centre exactly once, in order, whole and marked ``replicated_from``."""

from __future__ import annotations

import pytest

from .replication_support import replication_stats
from .support import receive_n

pytestmark = pytest.mark.interop


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
