"""Pulsar's admin v2 replication-cluster paths: a namespace's ``.../namespaces/{t}/{ns}/replication``
(GET, POST) and a topic's override ``.../persistent/{t}/{ns}/{topic}/replication`` (GET, POST,
DELETE; ``?applied=true`` answers what applies). Clusters must be known (412) and allowed by the
tenant (403), as Pulsar answers (broker/replication.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.policy_routes import add_namespace_policy, add_topic_policy
from magnetar.broker.replication import check_clusters

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.protocol.topic_name import TopicName

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}/replication"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/replication"


def _checked(service: BrokerService, tenant: str, body) -> list[str]:
    allowed = service.namespaces.tenant(tenant).get("allowedClusters", [])
    return check_clusters(body, service.clusters.names(), allowed)


def namespace_clusters(service: BrokerService, namespace: str) -> list[str]:
    """A namespace's replication clusters as Pulsar shows them: the local cluster when not set."""
    clusters = service.namespaces.policies(namespace).replication_clusters
    return list(clusters) if clusters is not None else [service.config.cluster_name]


def add_routes(app: web.Application, service: BrokerService) -> None:
    def checked(body: object, tenant: str) -> list[str]:
        return _checked(service, tenant, body)

    def applied(topic: TopicName) -> list[str]:
        return service.topic_replication.get(topic) or namespace_clusters(service, topic.namespace_name)

    # A namespace's clusters cannot be unset (Pulsar has no DELETE); not set shows the local cluster.
    add_namespace_policy(
        app,
        service,
        NAMESPACE,
        "replication_clusters",
        checked,
        show=list,
        unset=lambda: [service.config.cluster_name],
        writes=("POST",),
        removes=(),
        on_change=service.apply_policies,
    )
    add_topic_policy(
        app,
        service,
        TOPIC,
        service.topic_replication,
        checked,
        applied,
        writes=("POST",),
        on_change=lambda topic: service.apply_policies(topic.namespace_name),
    )
