"""``magnetar standalone --workers 2``: ``/metrics``, health and broker-wide stats on the one admin
port describe every worker, whichever worker the kernel hands the request to, with the official
client producing to topics owned by different workers."""

from __future__ import annotations

import os
import signal

import pytest

from magnetar.client.admin import AdminClient
from magnetar.client.admin.errors import AdminError

from ..waiting import eventually
from .support import receive_n, scrape
from .test_workers import WORKERS, topics_on_two_owners
from .test_workers_faults import SERVING

pytestmark = pytest.mark.interop

#: New connections are spread over the workers by the kernel: asking this often reaches both.
ASKS = 6


def worker_ids(broker) -> dict[str, tuple[str, int]]:
    """Each live worker's (broker id, pid) by its own pulsar:// URL, from the log."""
    serving = SERVING.findall(broker.log_text())
    return {f"pulsar://{broker.host}:{port}": (worker, int(pid)) for worker, pid, port in serving}


@pytest.mark.slow
def test_metrics_health_and_broker_stats_cover_both_workers(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    owners = topics_on_two_owners(broker.service_url, "metrics")
    ids = worker_ids(broker)
    by_worker = {ids[url][0]: topic for topic, url in owners.items()}  # one topic on each worker
    assert set(by_worker) == {"worker-0", "worker-1"}
    client = client_factory(broker.service_url)
    for n, (_, topic) in enumerate(sorted(by_worker.items()), start=3):
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "sub")
        for i in range(n):
            producer.send(b"%d" % i)
        receive_n(consumer, n, ack=True)
    admin = AdminClient(broker.http_url)

    for _ in range(ASKS):
        samples = scrape(broker)
        for n, (worker, topic) in enumerate(sorted(by_worker.items()), start=3):
            labels = (("cluster", "standalone"), ("namespace", "public/default"), ("topic", topic))
            labels += (("worker", worker),)
            assert samples[("pulsar_in_messages_total", labels)] == n
            assert samples[("pulsar_producers_count", labels)] == 1
            assert samples[("pulsar_active_connections", (("worker", worker),))] >= 1
            assert samples[("magnetar_worker_up", (("worker", worker),))] == 1
            assert samples[("process_resident_memory_bytes", (("worker", worker),))] > 0
        assert not [key for key in samples if "worker" not in dict(key[1])]  # every series is one worker's
        assert admin.request_bytes("GET", "/admin/v2/brokers/health")[0] == b"ok"
        stats = admin.request("GET", "/admin/v2/broker-stats/topics")["public/default"]
        listed = {
            topic: topic_stats
            for bundle in stats.values()
            for topic, topic_stats in bundle.get("persistent", {}).items()
        }
        for n, (_, topic) in enumerate(sorted(by_worker.items()), start=3):
            assert listed[topic]["msgInCounter"] == n
            assert topic in stats[admin.lookups.get_bundle_range(topic)]["persistent"]

    # A worker down (its supervisor paused, so that it is not started again yet): health says so,
    # /metrics says which worker is missing and still has the other's series.
    assert broker.proc is not None
    supervisor = broker.proc.pid
    victim = next(pid for worker, pid in ids.values() if worker == "worker-1")
    os.kill(supervisor, signal.SIGSTOP)
    try:
        os.kill(victim, signal.SIGKILL)
        eventually(lambda: exited(victim), what="worker-1 gone")  # its listeners closed
        with pytest.raises(AdminError) as refused:
            admin.request_bytes("GET", "/admin/v2/brokers/health")
        assert refused.value.status == 503 and "worker-1" in str(refused.value)
        samples = scrape(broker)
        assert samples[("magnetar_worker_up", (("worker", "worker-1"),))] == 0
        assert samples[("magnetar_worker_up", (("worker", "worker-0"),))] == 1
        assert samples[("pulsar_active_connections", (("worker", "worker-0"),))] >= 1
    finally:
        os.kill(supervisor, signal.SIGCONT)
    eventually(lambda: healthy(admin), what="worker-1 back")


def healthy(admin: AdminClient) -> bool:
    try:
        return admin.request_bytes("GET", "/admin/v2/brokers/health")[0] == b"ok"
    except AdminError:
        return False


def exited(pid: int) -> bool:
    """Whether every thread of ``pid`` has exited (it may be a zombie nobody reaped yet). The
    leader is a zombie as soon as it exits, while its other threads may still hold its sockets."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        with open(f"/proc/{pid}/stat") as stat:
            return tasks == [str(pid)] and stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
