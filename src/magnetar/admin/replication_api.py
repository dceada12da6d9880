"""Pulsar's admin v2 replication-cluster paths: a namespace's ``.../namespaces/{t}/{ns}/replication``
(GET, POST) and a topic's override ``.../persistent/{t}/{ns}/{topic}/replication`` (GET, POST,
DELETE; ``?applied=true`` answers what applies). Clusters must be known (412) and allowed by the
tenant (403), as Pulsar answers (broker/replication.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import json_body, no_content, topic_of, translate_errors
from magnetar.broker.replication import check_clusters

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

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
    def ns(request: web.Request) -> str:
        return f"{request.match_info['tenant']}/{request.match_info['namespace']}"

    @translate_errors
    async def get_namespace(request):
        return web.json_response(namespace_clusters(service, ns(request)))

    @translate_errors
    async def set_namespace(request):
        name = ns(request)
        service.namespaces.policies(name)  # 404 first
        clusters = _checked(service, request.match_info["tenant"], await json_body(request))
        service.namespaces.update_policy(name, replication_clusters=clusters)
        service.apply_policies(name)
        return no_content()

    @translate_errors
    async def get_topic(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        override = service.topic_replication.get(topic)
        if request.query.get("applied", "false").lower() == "true":
            return web.json_response(override or namespace_clusters(service, topic.namespace_name))
        if override is None:
            return no_content()
        return web.json_response(override)

    @translate_errors
    async def set_topic(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        clusters = _checked(service, topic.tenant, await json_body(request))
        service.topic_replication.set(topic, clusters)
        service.apply_policies(topic.namespace_name)
        return no_content()

    @translate_errors
    async def remove_topic(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        service.topic_replication.remove(topic)
        service.apply_policies(topic.namespace_name)
        return no_content()

    app.router.add_get(NAMESPACE, get_namespace)
    app.router.add_post(NAMESPACE, set_namespace)
    app.router.add_get(TOPIC, get_topic)
    app.router.add_post(TOPIC, set_topic)
    app.router.add_delete(TOPIC, remove_topic)
