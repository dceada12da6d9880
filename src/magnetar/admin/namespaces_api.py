"""Pulsar's admin v2 paths for tenants, namespaces and namespace policies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import json_body, no_content, translate_errors
from magnetar.broker import backlog_quota
from magnetar.broker.authorization import check_tenant_info
from magnetar.broker.errors import NotAllowed
from magnetar.broker.namespaces import AutoTopicCreation, NamespacePolicies
from magnetar.broker.schemas.compatibility import STRATEGIES as SCHEMA_STRATEGIES

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


BASE = "/admin/v2/namespaces/{tenant}/{namespace}"


def add_routes(app: web.Application, service: BrokerService) -> None:
    _policy_routes(app, service)
    _backlog_quota_routes(app, service)
    _retention_routes(app, service)
    _tenant_routes(app, service)
    _namespace_routes(app, service)


def _ns(request: web.Request) -> str:
    return f"{request.match_info['tenant']}/{request.match_info['namespace']}"


def _tenant_routes(app: web.Application, service: BrokerService) -> None:
    def registry():
        return service.namespaces

    @translate_errors
    async def list_tenants(request):
        return web.json_response(registry().tenants())

    @translate_errors
    async def get_tenant(request):
        return web.json_response(registry().tenant(request.match_info["tenant"]))

    def checked(info) -> dict:
        """TenantInfo whose allowedClusters are known clusters (412 otherwise, as Pulsar);
        none given: the local cluster."""
        info = check_tenant_info(info)
        info.setdefault("allowedClusters", [service.config.cluster_name])
        unknown = service.clusters.unknown(info["allowedClusters"])
        if unknown:
            raise NotAllowed(f"Clusters {unknown} do not exist")
        return info

    @translate_errors
    async def put_tenant(request):
        info = await json_body(request, default={"adminRoles": []})
        registry().create_tenant(request.match_info["tenant"], checked(info))
        return no_content()

    @translate_errors
    async def post_tenant(request):
        tenant = request.match_info["tenant"]
        info = checked(await json_body(request))
        registry().tenant(tenant)
        for namespace in registry().namespaces(tenant):
            dropped = set(registry().policies(namespace).replication_clusters or ()) - set(
                info["allowedClusters"]
            )
            if dropped:
                raise NotAllowed(f"Cluster {sorted(dropped)} is used by namespace {namespace}'s replication")
        registry().update_tenant(tenant, info)
        return no_content()

    @translate_errors
    async def delete_tenant(request):
        registry().delete_tenant(request.match_info["tenant"])
        return no_content()

    app.router.add_get("/admin/v2/tenants", list_tenants)
    app.router.add_get("/admin/v2/tenants/{tenant}", get_tenant)
    app.router.add_put("/admin/v2/tenants/{tenant}", put_tenant)
    app.router.add_post("/admin/v2/tenants/{tenant}", post_tenant)
    app.router.add_delete("/admin/v2/tenants/{tenant}", delete_tenant)


def _namespace_routes(app: web.Application, service: BrokerService) -> None:
    def registry():
        return service.namespaces

    @translate_errors
    async def list_namespaces(request):
        tenant = request.match_info["tenant"]
        registry().tenant(tenant)
        return web.json_response(registry().namespaces(tenant))

    @translate_errors
    async def get_namespace(request):
        policies = registry().policies(_ns(request)).to_json()
        if policies["replication_clusters"] is None:
            policies["replication_clusters"] = [service.config.cluster_name]  # as Pulsar shows it
        return web.json_response(policies)

    @translate_errors
    async def put_namespace(request):
        body = await json_body(request, default={})
        registry().create_namespace(_ns(request), NamespacePolicies.from_json(body))
        return no_content()

    @translate_errors
    async def delete_namespace(request):
        name = _ns(request)
        # Listed on the listing thread (a namespace of 100,000 topics is refused as not empty
        # without stalling the loop); an empty one is listed again here, at once, so a topic made
        # meanwhile is not left in a deleted namespace.
        topics = await service.listing_topics(name, None, lambda topics: topics)
        registry().delete_namespace(name, topics or service.topics_of_namespace(name))
        return no_content()

    app.router.add_get("/admin/v2/namespaces/{tenant}", list_namespaces)
    app.router.add_get(BASE, get_namespace)
    app.router.add_put(BASE, put_namespace)
    app.router.add_delete(BASE, delete_namespace)


def _parse_bool(value) -> bool:
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


def _parse_ttl(value) -> int:
    if not isinstance(value, int) or value < 0:
        raise ValueError("message TTL must be a non-negative number of seconds")
    return value


def _parse_strategy(value) -> str:
    if value not in SCHEMA_STRATEGIES:
        raise ValueError(f"schema compatibility strategy must be one of {', '.join(SCHEMA_STRATEGIES)}")
    return value


def _parse_limit(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("a limit must be a number, 0 (no limit) or more")
    return value


def _parse_auto(value) -> dict:
    return AutoTopicCreation.from_json(value).to_json()


#: The policies of one field each: path under the namespace, field of NamespacePolicies, parser.
POLICIES = (
    ("deduplication", "deduplication_enabled", _parse_bool),
    ("messageTTL", "message_ttl_seconds", _parse_ttl),
    ("schemaCompatibilityStrategy", "schema_compatibility_strategy", _parse_strategy),
    ("autoTopicCreation", "auto_topic_creation", _parse_auto),
    ("maxProducersPerTopic", "max_producers_per_topic", _parse_limit),
    ("maxConsumersPerTopic", "max_consumers_per_topic", _parse_limit),
    ("maxConsumersPerSubscription", "max_consumers_per_subscription", _parse_limit),
    ("maxTopicsPerNamespace", "max_topics_per_namespace", _parse_limit),
)


def _policy_routes(app: web.Application, service: BrokerService) -> None:
    for path, field, parse in POLICIES:
        read, write, remove = _policy_handlers(service, field, parse)
        app.router.add_get(f"{BASE}/{path}", read)
        app.router.add_post(f"{BASE}/{path}", write)
        app.router.add_put(f"{BASE}/{path}", write)
        app.router.add_delete(f"{BASE}/{path}", remove)


def _policy_handlers(service: BrokerService, field: str, parse):
    """GET, POST/PUT and DELETE of one namespace policy field."""

    @translate_errors
    async def read(request):
        value = getattr(service.namespaces.policies(_ns(request)), field)
        if value is None:
            return no_content()
        return web.json_response(value)

    @translate_errors
    async def write(request):
        service.namespaces.update_policy(_ns(request), **{field: parse(await json_body(request))})
        service.apply_policies(_ns(request))
        return no_content()

    @translate_errors
    async def remove(request):
        service.namespaces.update_policy(_ns(request), **{field: None})
        service.apply_policies(_ns(request))
        return no_content()

    return read, write, remove


def _retention_routes(app: web.Application, service: BrokerService) -> None:
    @translate_errors
    async def get_retention(request):
        p = service.namespaces.policies(_ns(request))
        if p.retention_time_minutes is None and p.retention_size_mb is None:
            return no_content()
        return web.json_response(
            {
                "retentionTimeInMinutes": p.retention_time_minutes or 0,
                "retentionSizeInMB": p.retention_size_mb or 0,
            }
        )

    @translate_errors
    async def set_retention(request):
        body = await json_body(request)
        minutes = int(body.get("retentionTimeInMinutes", 0))
        size_mb = int(body.get("retentionSizeInMB", 0))
        service.namespaces.update_policy(
            _ns(request), retention_time_minutes=minutes, retention_size_mb=size_mb
        )
        service.apply_policies(_ns(request))
        return no_content()

    @translate_errors
    async def remove_retention(request):
        service.namespaces.update_policy(_ns(request), retention_time_minutes=None, retention_size_mb=None)
        service.apply_policies(_ns(request))
        return no_content()

    app.router.add_get(f"{BASE}/retention", get_retention)
    app.router.add_post(f"{BASE}/retention", set_retention)
    app.router.add_delete(f"{BASE}/retention", remove_retention)


def _quota_kind(request) -> str:
    kind = request.query.get("backlogQuotaType", backlog_quota.SIZE)
    if kind not in backlog_quota.KINDS:
        raise ValueError(f"backlogQuotaType must be one of {', '.join(backlog_quota.KINDS)}")
    return kind


def _backlog_quota_routes(app: web.Application, service: BrokerService) -> None:
    def quotas_of(request) -> dict:
        return dict(service.namespaces.policies(_ns(request)).backlog_quota_map or {})

    @translate_errors
    async def get_backlog_quotas(request):
        return web.json_response(quotas_of(request))

    @translate_errors
    async def set_backlog_quota(request):
        kind = _quota_kind(request)
        quota = backlog_quota.BacklogQuota.from_json(await json_body(request))
        quotas = quotas_of(request)
        quotas[kind] = quota.to_json()
        service.namespaces.update_policy(_ns(request), backlog_quota_map=quotas)
        return no_content()

    @translate_errors
    async def remove_backlog_quota(request):
        kind = _quota_kind(request)
        quotas = quotas_of(request)
        quotas.pop(kind, None)
        service.namespaces.update_policy(_ns(request), backlog_quota_map=quotas or None)
        return no_content()

    app.router.add_get(f"{BASE}/backlogQuotaMap", get_backlog_quotas)
    app.router.add_post(f"{BASE}/backlogQuota", set_backlog_quota)
    app.router.add_delete(f"{BASE}/backlogQuota", remove_backlog_quota)
