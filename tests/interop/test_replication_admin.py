"""Geo-replication seen and steered through the admin API: the topic stats' ``replication``
section and ``/metrics`` show each remote; the replication cursor is a cursor, not a
subscription; taking a cluster out of a namespace's (or one topic's) replication clusters stops
replication to it and deletes its cursor. The official client produces and consumes."""

from __future__ import annotations

import urllib.request

import pytest

from tests.waiting import eventually

from .replication_support import (
    replicated,
    replication_stats,
    set_namespace_clusters,
    set_topic_clusters,
    topic_path,
)
from .support import admin_call, receive_n, scrape

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: two broker processes a test


def topic_admin(broker, topic: str, what: str):
    status, answer = admin_call(broker, "GET", f"/admin/v2/{topic_path(topic)}/{what}")
    assert status == 200, (status, answer)
    return answer


def cursors(broker, topic: str) -> set[str]:
    return set(topic_admin(broker, topic, "internalStats")["cursors"])


def test_stats_and_metrics_show_the_remote_and_the_cursor_is_no_subscription(clusters, client_factory, topic):
    edge, _ = clusters.start("edge", "central")
    clusters.link("edge", "central")
    clusters.replicate("edge", ["edge", "central"])
    client_factory(edge.service_url).subscribe(topic, "local-app")
    producer = client_factory(edge.service_url).create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    eventually(lambda: replicated(edge, topic, "central", 10), what="10 messages replicated")

    stats = topic_admin(edge, topic, "stats")
    remote = stats["replication"]["central"]
    assert (remote["connected"], remote["replicationBacklog"], remote["msgOutCount"]) == (True, 0, 10)
    assert list(stats["subscriptions"]) == ["local-app"]
    assert topic_admin(edge, topic, "subscriptions") == ["local-app"]
    assert "pulsar.repl.central" in cursors(edge, topic)

    samples = {
        name: value
        for (name, labels), value in scrape(edge).items()
        if name.startswith(("pulsar_replication_", "magnetar_replication_"))
        and ("topic", topic) in labels
        and ("remote_cluster", "central") in labels
    }
    assert samples["pulsar_replication_backlog"] == 0
    assert samples["pulsar_replication_connected_count"] == 1
    assert samples["magnetar_replication_out_messages_total"] == 10
    assert {"pulsar_replication_rate_out", "pulsar_replication_delay_in_seconds"} <= set(samples)


def test_removing_the_remote_from_the_namespace_stops_replication_and_deletes_the_cursor(
    clusters, client_factory, topic
):
    """What is produced while the remote is out of the namespace's clusters is never replicated:
    once it is back, a new cursor starts at the end and the next message the centre sees is the
    first one produced after that."""
    edge, central = clusters.start("edge", "central")
    clusters.link("edge", "central")
    clusters.replicate("edge", ["edge", "central"])
    at_centre = client_factory(central.service_url).subscribe(topic, "city")
    producer = client_factory(edge.service_url).create_producer(topic)
    producer.send(b"before")
    assert [m.data() for m in receive_n(at_centre, 1, ack=True)] == [b"before"]

    set_namespace_clusters(edge, ["edge"])
    eventually(lambda: replication_stats(edge, topic) == {}, what="the replication section emptied")
    assert "pulsar.repl.central" not in cursors(edge, topic)
    producer.send(b"while out")

    set_namespace_clusters(edge, ["edge", "central"])
    producer.send(b"after")
    assert [m.data() for m in receive_n(at_centre, 1, ack=True)] == [b"after"]


def test_a_topic_override_narrows_one_topic(clusters, client_factory, topic):
    """The namespace replicates a to b and c; one topic's override names only a and b. Its
    messages reach b but not c, while another topic of the namespace reaches both; with the
    override removed, c gets that topic's messages from then on."""
    a, b, c = clusters.start("a", "b", "c")
    clusters.link("a", "b", "c")
    clusters.replicate("a", ["a", "b", "c"])
    narrowed, other = topic + "-narrowed", topic + "-other"
    set_topic_clusters(a, narrowed, ["a", "b"])
    status, applied = admin_call(a, "GET", f"/admin/v2/{topic_path(narrowed)}/replication?applied=true")
    assert (status, applied) == (200, ["a", "b"])
    at_b = client_factory(b.service_url).subscribe([narrowed, other], "s")
    at_c = client_factory(c.service_url).subscribe([narrowed, other], "s")
    to_narrowed = client_factory(a.service_url).create_producer(narrowed)
    to_other = client_factory(a.service_url).create_producer(other)

    to_narrowed.send(b"narrowed")
    to_other.send(b"other")
    assert sorted(m.data() for m in receive_n(at_b, 2, ack=True)) == [b"narrowed", b"other"]
    assert [m.data() for m in receive_n(at_c, 1, ack=True)] == [b"other"]
    assert set(replication_stats(a, narrowed)) == {"b"}
    assert "pulsar.repl.c" not in cursors(a, narrowed)

    status, answer = admin_call(a, "DELETE", f"/admin/v2/{topic_path(narrowed)}/replication")
    assert status == 204, (status, answer)
    to_narrowed.send(b"narrowed, then widened")
    assert [m.data() for m in receive_n(at_c, 1, ack=True)] == [b"narrowed, then widened"]


def test_peek_at_the_centre_names_the_cluster_a_message_came_from(clusters, client_factory, topic):
    edge, central = clusters.start("edge", "central")
    clusters.link("edge", "central")
    clusters.replicate("edge", ["edge", "central"])
    client_factory(central.service_url).subscribe(topic, "city")
    client_factory(central.service_url).create_producer(topic).send(b"local")
    client_factory(edge.service_url).create_producer(topic).send(b"copied")
    eventually(lambda: replicated(edge, topic, "central", 1), what="the copy stored at the centre")

    def peek(n: int) -> tuple[bytes, str | None]:
        url = f"{central.http_url}/admin/v2/{topic_path(topic)}/subscription/city/position/{n}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read(), response.headers.get("X-Pulsar-replicated-from")

    assert [peek(1), peek(2)] == [(b"local", None), (b"copied", "edge")]
