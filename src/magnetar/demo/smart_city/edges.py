"""The brokers of a city with districts: a central broker and one edge broker per district, each its
own process and its own cluster, linked for geo-replication through the admin HTTP API.

    district-K edge: city-telemetry (override: district-K, central) ──► central: city-telemetry
    central: city-alerts-<area> (override: central, every district) ──► every district's edge

Topic-level overrides, not namespace policies, so the frames topic and everything else stay local;
a replicated message is never replicated again, so central's telemetry (no override) stays put.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from magnetar.client.admin import AdminClient
from magnetar.client.admin.clusters import cluster_data
from magnetar.client.admin.errors import NotFoundError
from magnetar.demo.smart_city.broker import EmbeddedBroker
from magnetar.demo.smart_city.districts import CENTRAL, Lag, district_names
from magnetar.demo.smart_city.settings import CitySettings


class Districts:
    """The central broker and the district edges (started, linked, stopped together)."""

    def __init__(self, settings: CitySettings, work: Path, broker_settings: dict[str, object]) -> None:
        self.settings = settings
        self.names = district_names(settings.districts)
        self.central = EmbeddedBroker(work / CENTRAL, {**broker_settings, "cluster_name": CENTRAL})
        self.edges = {n: EmbeddedBroker(work / n, {**broker_settings, "cluster_name": n}) for n in self.names}

    def start(self) -> None:
        for broker in [self.central, *self.edges.values()]:
            broker.start()

    def stop(self) -> None:
        for broker in [*self.edges.values(), self.central]:
            if broker.proc is not None:
                broker.stop()

    def admin(self, name: str) -> AdminClient:
        broker = self.central if name == CENTRAL else self.edges[name]
        return AdminClient(broker.admin_url)

    def configure(self, areas: Sequence[str]) -> None:
        """Register the clusters with each other, allow them in the tenant, create the topics, and
        set the replication overrides: telemetry edge -> central, alerts central -> every edge."""
        s = self.settings
        central = self.admin(CENTRAL)
        for name, edge in self.edges.items():
            _register(central, name, edge)
        _allow(central, s.namespace, [CENTRAL, *self.names])
        central.create_namespace(s.namespace, exist_ok=True)
        central.create_partitioned_topic(s.telemetry_topic, s.partitions)
        for area in areas:
            topic = s.alerts_topic(area)
            central.topics.create_non_partitioned_topic(topic)
            central.topics.set_replication_clusters(topic, [CENTRAL, *self.names])
        for name in self.names:
            edge_admin = self.admin(name)
            _register(edge_admin, CENTRAL, self.central)
            _allow(edge_admin, s.namespace, [name, CENTRAL])
            edge_admin.create_namespace(s.namespace, exist_ok=True)
            edge_admin.create_partitioned_topic(s.telemetry_topic, s.partitions)
            edge_admin.topics.set_replication_clusters(s.telemetry_topic, [name, CENTRAL])

    def backlog(self, name: str) -> tuple[int, float]:
        """The district's telemetry replication to central: (replicationBacklog summed over the
        partitions, the largest replicationDelayInSeconds), from its edge's topic stats."""
        admin = self.admin(name)
        backlog, delay = 0, 0.0
        for partition in range(self.settings.partitions):
            stats = admin.topics.stats(f"{self.settings.telemetry_topic}-partition-{partition}")
            to_central = stats.get("replication", {}).get(CENTRAL, {})
            backlog += int(to_central.get("replicationBacklog", 0))
            delay = max(delay, float(to_central.get("replicationDelayInSeconds", 0)))
        return backlog, delay

    def wait_drained(self, timeout_s: float) -> dict[str, Lag]:
        """Each district's lag now (the traffic just stopped), then how long until its backlog to
        central is 0, polled for at most ``timeout_s``."""
        started = time.monotonic()
        at_end = {name: self.backlog(name) for name in self.names}
        drained: dict[str, float] = {}
        final = {name: backlog for name, (backlog, _) in at_end.items()}
        deadline = started + timeout_s
        while True:
            for name in self.names:
                if name in drained:
                    continue
                if final[name] == 0:
                    drained[name] = time.monotonic() - started
                else:
                    final[name] = self.backlog(name)[0]
            if len(drained) == len(self.names) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return {
            name: Lag(at_end[name][0], at_end[name][1], drained.get(name), final[name]) for name in self.names
        }


def _register(admin: AdminClient, name: str, broker: EmbeddedBroker) -> None:
    """Make ``name`` (served by ``broker``) a cluster that ``admin``'s broker can replicate to."""
    data = cluster_data(service_url=broker.admin_url, broker_service_url=broker.service_url)
    admin.clusters.create(name, data)


def _allow(admin: AdminClient, namespace: str, clusters: list[str]) -> None:
    """Let the namespace's tenant use ``clusters`` (creating the tenant if it is not there)."""
    tenant = namespace.split("/")[0]
    try:
        admin.tenants.update(tenant, allowed_clusters=clusters)
    except NotFoundError:
        admin.tenants.create(tenant, allowed_clusters=clusters)
