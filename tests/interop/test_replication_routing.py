"""Where replicated messages go, with the official client: in a full mesh each message reaches
every other cluster once and is never sent on (no loops); a centre replicates back to its edges;
a message's ``replication_clusters`` narrows its clusters and ``disable_replication`` keeps it
local. test_replication.py is about the messages themselves."""

from __future__ import annotations

import pulsar
import pytest

from tests.waiting import eventually

from .replication_support import replicated, replication_stats
from .support import assert_next_are_markers, assert_next_is_marker, receive_n

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: three broker processes a test

N = 20


def test_a_full_mesh_delivers_each_message_once_everywhere_and_does_not_loop(clusters, client_factory, topic):
    """Three clusters replicating to each other: each cluster's consumer gets its own messages
    and the two others', once each. A cluster's replicators send only what was produced there
    (msgOutCount stays N): what came from another cluster is never sent on."""
    names = ("a", "b", "c")
    brokers = dict(zip(names, clusters.start(*names), strict=True))
    clusters.mesh(*names)
    consumers = [client_factory(brokers[n].service_url).subscribe(topic, "everything") for n in names]
    producers = [client_factory(brokers[n].service_url).create_producer(topic) for n in names]
    for name, producer in zip(names, producers, strict=True):
        for i in range(N):
            producer.send(f"{name}-{i}".encode())

    for name in names:  # every replicator done: from now on nothing more can arrive anywhere
        for remote in names:
            if remote != name:
                eventually(lambda b=brokers[name], r=remote: replicated(b, topic, r, N))
    expected = sorted(f"{n}-{i}".encode() for n in names for i in range(N))
    for name, consumer, producer in zip(names, consumers, producers, strict=True):
        got = [m.data() for m in receive_n(consumer, len(expected), ack=True)]
        assert sorted(got) == expected, f"cluster {name} got {len(got)} messages, not each once"
        # a marker of this cluster's own: a message twice would have been stored before it
        assert_next_is_marker(consumer, producer, disable_replication=True)
    for name in names:  # still N each: nothing was sent on after the first pass either
        assert {r: s["msgOutCount"] for r, s in replication_stats(brokers[name], topic).items()} == {
            remote: N for remote in names if remote != name
        }


def test_the_centre_replicates_alerts_back_to_the_edges(clusters, client_factory, topic):
    """Edges send telemetry to the centre; the centre replicates to both edges too, so alerts
    produced there reach each edge once, while one edge's telemetry, replicated from it, does
    not travel on through the centre to the other edge."""
    edge1, edge2, central = clusters.start("edge1", "edge2", "central")
    for edge in ("edge1", "edge2"):
        clusters.link(edge, "central")
        clusters.replicate(edge, [edge, "central"])
    clusters.link("central", "edge1", "edge2")
    clusters.replicate("central", ["central", "edge1", "edge2"])
    telemetry, alerts = topic + "-telemetry", topic + "-alerts"
    at_edge2 = client_factory(edge2.service_url).subscribe([telemetry, alerts], "district")
    at_edge1 = client_factory(edge1.service_url).subscribe(alerts, "district")

    client_factory(edge1.service_url).create_producer(telemetry).send(b"speed 93 km/h")
    alerter = client_factory(central.service_url).create_producer(alerts)
    for i in range(5):
        alerter.send(f"alert-{i}".encode())

    for consumer in (at_edge1, at_edge2):
        assert [m.data() for m in receive_n(consumer, 5, ack=True)] == [
            f"alert-{i}".encode() for i in range(5)
        ]
    eventually(lambda: replicated(edge1, telemetry, "central", 1))
    # the centre's replicator to edge2 has passed the telemetry and sent none of it
    eventually(lambda: replicated(central, telemetry, "edge2", 0))
    # a marker on each topic at edge2: what was on its way there (the telemetry, an alert twice) comes first
    local = client_factory(edge2.service_url)
    markers = {b"marker-telemetry": telemetry, b"marker-alerts": alerts}
    producers = {marker: local.create_producer(name) for marker, name in markers.items()}
    assert_next_are_markers(at_edge2, producers, disable_replication=True)


def test_replication_clusters_on_send_narrow_where_a_message_goes(clusters, client_factory, topic):
    """``replication_clusters=["b"]`` reaches b and not c; ``disable_replication=True`` reaches
    neither. The marker, sent to all, comes next everywhere: nothing else was on its way."""
    a, b, c = clusters.start("a", "b", "c")
    clusters.link("a", "b", "c")
    clusters.replicate("a", ["a", "b", "c"])
    at_b = client_factory(b.service_url).subscribe(topic, "s")
    at_c = client_factory(c.service_url).subscribe(topic, "s")
    producer = client_factory(a.service_url).create_producer(topic)

    producer.send(b"for b only", replication_clusters=["b"])
    producer.send(b"local only", disable_replication=True)

    producer.send(b"marker")  # for every cluster, after them: it comes next wherever they did not

    assert [m.data() for m in receive_n(at_b, 2, ack=True)] == [b"for b only", b"marker"]
    assert [m.data() for m in receive_n(at_c, 1, ack=True)] == [b"marker"]
    local = client_factory(a.service_url).subscribe(
        topic, "audit", initial_position=pulsar.InitialPosition.Earliest
    )
    assert [m.data() for m in receive_n(local, 3)] == [b"for b only", b"local only", b"marker"]
