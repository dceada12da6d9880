"""Clusters of real broker processes for the geo-replication tests: each broker is one cluster
(its ``cluster_name``), registered with the others through the admin API as Pulsar's clusters
are, and a namespace set to replicate between them.

    edge, central = clusters.start("edge", "central")
    clusters.link("edge", "central")            # edge knows central as a remote cluster
    clusters.replicate("edge", ["edge", "central"])   # public/default on edge replicates to central
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from .conftest import BrokerProcess
from .support import admin_call

NAMESPACE = "public/default"


def cluster_data(broker: BrokerProcess) -> dict[str, object]:
    """The ClusterData another broker needs to replicate to ``broker``."""
    return {"serviceUrl": broker.http_url, "brokerServiceUrl": broker.service_url}


class Clusters:
    """Brokers by cluster name, started on ``root/{name}``; all killed at teardown."""

    def __init__(self, root: Path, brokers: list[BrokerProcess]) -> None:
        self.root = root
        #: The fixture's list: every broker in it is killed at teardown, and its log goes into a
        #: failing test's report.
        self._all = brokers
        self.brokers: dict[str, BrokerProcess] = {}

    def __getitem__(self, name: str) -> BrokerProcess:
        return self.brokers[name]

    def start(self, *names: str, config: dict[str, object] | None = None) -> list[BrokerProcess]:
        """One broker per name, ``cluster_name`` set (plus ``config``)."""
        out = []
        for name in names:
            broker = BrokerProcess(self.root / name, {"cluster_name": name, **(config or {})})
            self._all.append(broker)
            self.brokers[name] = broker.start()
            out.append(broker)
        return out

    def link(self, at: str, *remotes: str, data: dict[str, object] | None = None) -> None:
        """Register ``remotes`` as clusters on ``at`` (``data`` replaces their ClusterData)."""
        for remote in remotes:
            body = data if data is not None else cluster_data(self.brokers[remote])
            status, answer = admin_call(self.brokers[at], "PUT", f"/admin/v2/clusters/{remote}", body)
            assert status == 204, (status, answer)

    def replicate(self, at: str, clusters: Iterable[str], namespace: str = NAMESPACE) -> None:
        """On ``at``: let ``namespace``'s tenant use ``clusters`` and replicate the namespace to them."""
        clusters = list(clusters)
        tenant = namespace.split("/")[0]
        body = {"adminRoles": [], "allowedClusters": clusters}
        status, answer = admin_call(self.brokers[at], "POST", f"/admin/v2/tenants/{tenant}", body)
        assert status == 204, (status, answer)
        status, answer = admin_call(
            self.brokers[at], "POST", f"/admin/v2/namespaces/{namespace}/replication", clusters
        )
        assert status == 204, (status, answer)

    def mesh(self, *names: str, namespace: str = NAMESPACE) -> None:
        """Every broker in ``names`` knows the others and replicates ``namespace`` to all of them."""
        for name in names:
            self.link(name, *(other for other in names if other != name))
            self.replicate(name, names, namespace)


def replication_stats(broker: BrokerProcess, topic: str) -> dict[str, dict]:
    """The ``replication`` section of ``topic``'s stats on ``broker``, by remote cluster."""
    path = "/admin/v2/" + topic.replace("://", "/") + "/stats"
    status, stats = admin_call(broker, "GET", path)
    assert status == 200, (status, stats)
    return stats["replication"]


def topic_path(topic: str) -> str:
    """``persistent://t/ns/name`` as the admin API's ``persistent/t/ns/name``."""
    return topic.replace("://", "/")


def set_topic_clusters(broker: BrokerProcess, topic: str, clusters: list[str]) -> None:
    """The topic-level override of the replication clusters (narrows one topic of a namespace)."""
    status, answer = admin_call(broker, "POST", f"/admin/v2/{topic_path(topic)}/replication", clusters)
    assert status == 204, (status, answer)


def replicated(broker: BrokerProcess, topic: str, remote: str, count: int) -> bool:
    """``count`` messages of ``topic`` stored by ``remote`` and nothing left to send: a check for
    ``eventually``. Once true, what the remote has of ``topic`` from ``broker`` is final."""
    stats = replication_stats(broker, topic).get(remote)
    assert stats is not None, f"no replicator to {remote}"
    assert (stats["msgOutCount"], stats["replicationBacklog"]) == (count, 0), stats
    return True


def replicated_from(broker: BrokerProcess, topic: str, count: int) -> list[tuple[bytes, str | None]]:
    """(payload, ``replicated_from``) of the first ``count`` messages of ``topic`` on ``broker``,
    read with Magnetar's own client (the official one does not expose ``replicated_from``)."""
    from magnetar.client import Client, MessageId

    client = Client(broker.service_url, operation_timeout_seconds=10)
    try:
        reader = client.create_reader(topic, MessageId.earliest)
        messages = [reader.read_next(10_000) for _ in range(count)]
        return [(msg.data(), msg.replicated_from()) for msg in messages]
    finally:
        client.close()


def set_namespace_clusters(broker: BrokerProcess, clusters: list[str], namespace: str = NAMESPACE) -> None:
    """The namespace's replication clusters alone (the tenant's ``allowedClusters`` unchanged: a
    tenant may not drop a cluster its namespaces replicate to, Pulsar answers 412)."""
    status, answer = admin_call(broker, "POST", f"/admin/v2/namespaces/{namespace}/replication", clusters)
    assert status == 204, (status, answer)
