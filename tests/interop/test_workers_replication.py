"""Geo-replication from a ``magnetar standalone --workers 2`` cluster: when a replicated topic's
bundle changes hands (unloaded, or its owner killed with -9), the new owner loads the topic and
replicates what the remote still lacks, with no client touching the topic on that side."""

from __future__ import annotations

import os
import re
import signal

import pulsar
import pytest

from magnetar.client.admin import AdminClient

from ..waiting import eventually
from .replication_support import NAMESPACE, replicated
from .support import receive_n
from .test_workers import WORKERS, topics_on_two_owners
from .test_workers_faults import worker_pids

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: three broker processes and a takeover


@pytest.mark.parametrize("takeover", ["unload", "kill"])
def test_the_new_owner_of_a_bundle_resumes_its_replication(clusters, client_factory, takeover):
    (edge,) = clusters.start("edge", config=WORKERS)
    (central,) = clusters.start("central")
    clusters.link("edge", "central")
    clusters.replicate("edge", ["edge", "central"])
    own_urls = re.findall(r"worker-\d+ \(pid \d+\) serving on \S+ and (http://\S+)", edge.log_text())
    assert len(own_urls) == 2, edge.log_text()
    for url in own_urls:  # each worker has heard of the policy (polled) before a topic loads there
        clusters_at = AdminClient(url).namespaces.get_namespace_replication_clusters
        eventually(lambda clusters_at=clusters_at: "central" in clusters_at(NAMESPACE))
    topic = next(iter(topics_on_two_owners(edge.service_url, "geo")))
    consumer = client_factory(central.service_url).subscribe(topic, "city")
    producer = client_factory(edge.service_url).create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"before-{i}".encode())
    eventually(lambda: replicated(edge, topic, "central", 5), what="the first messages replicated")
    assert [m.data() for m in receive_n(consumer, 5, ack=True)] == [f"before-{i}".encode() for i in range(5)]
    consumer.close()

    # The remote is down: what is sent now is stored on the edge, not yet replicated.
    ports = (central.port, central.http_port)
    central.stop()
    for i in range(5):
        producer.send(f"during-{i}".encode())
    producer.close()  # from here on, no client uses the topic on the edge
    admin = AdminClient(edge.http_url)
    owner = admin.lookups.lookup_topic(topic)
    if takeover == "unload":
        admin.namespaces.unload_namespace_bundle("public/default", admin.lookups.get_bundle_range(topic))
    else:
        os.kill(worker_pids(edge)[owner], signal.SIGKILL)
    central.start(*ports)  # where the edge's cluster data says it is
    reader = client_factory(central.service_url).subscribe(
        topic, "after", initial_position=pulsar.InitialPosition.Earliest
    )
    want = {f"during-{i}".encode() for i in range(5)}
    got: set[bytes] = set()
    while not want <= got:  # every message stored meanwhile reaches the remote
        got.add(reader.receive(30_000).data())
