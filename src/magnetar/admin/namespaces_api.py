"""Pulsar's admin v2 paths for tenants, namespaces and namespace policies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import json_body, no_content, translate_errors
from magnetar.broker import backlog_quota
from magnetar.broker.authorization import check_tenant_info
from magnetar.broker.namespaces import AutoTopicCreation, NamespacePolicies
from magnetar.broker.schemas.compatibility import STRATEGIES as SCHEMA_STRATEGIES

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


def add_routes(app: web.Application, service: BrokerService) -> None:
    def registry():
        return service.namespaces

    def ns(request: web.Request) -> str:
        return f"{request.match_info['tenant']}/{request.match_info['namespace']}"

    @translate_errors
    async def list_tenants(request):
        return web.json_response(registry().tenants())

    @translate_errors
    async def get_tenant(request):
        return web.json_response(registry().tenant(request.match_info["tenant"]))

    @translate_errors
    async def put_tenant(request):
        info = await json_body(request, default={"adminRoles": [], "allowedClusters": ["standalone"]})
        registry().create_tenant(request.match_info["tenant"], check_tenant_info(info))
        return no_content()

    @translate_errors
    async def post_tenant(request):
        registry().update_tenant(request.match_info["tenant"], check_tenant_info(await json_body(request)))
        return no_content()

    @translate_errors
    async def delete_tenant(request):
        registry().delete_tenant(request.match_info["tenant"])
        return no_content()

    @translate_errors
    async def list_namespaces(request):
        tenant = request.match_info["tenant"]
        registry().tenant(tenant)
        return web.json_response(registry().namespaces(tenant))

    @translate_errors
    async def get_namespace(request):
        return web.json_response(registry().policies(ns(request)).to_json())

    @translate_errors
    async def put_namespace(request):
        body = await json_body(request, default={})
        registry().create_namespace(ns(request), NamespacePolicies.from_json(body))
        return no_content()

    @translate_errors
    async def delete_namespace(request):
        name = ns(request)
        registry().delete_namespace(name, service.topics_of_namespace(name))
        return no_content()

    def policy(field: str, parse, render=lambda v: v):
        @translate_errors
        async def read(request):
            value = getattr(registry().policies(ns(request)), field)
            if value is None:
                return no_content()
            return web.json_response(render(value))

        @translate_errors
        async def write(request):
            registry().update_policy(ns(request), **{field: parse(await json_body(request))})
            service.apply_policies(ns(request))
            return no_content()

        @translate_errors
        async def remove(request):
            registry().update_policy(ns(request), **{field: None})
            service.apply_policies(ns(request))
            return no_content()

        return read, write, remove

    def parse_bool(value) -> bool:
        if not isinstance(value, bool):
            raise ValueError("expected true or false")
        return value

    def parse_ttl(value) -> int:
        if not isinstance(value, int) or value < 0:
            raise ValueError("message TTL must be a non-negative number of seconds")
        return value

    def parse_strategy(value) -> str:
        if value not in SCHEMA_STRATEGIES:
            raise ValueError(f"schema compatibility strategy must be one of {', '.join(SCHEMA_STRATEGIES)}")
        return value

    def parse_limit(value) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError("a limit must be a number, 0 (no limit) or more")
        return value

    def parse_auto(value) -> dict:
        return AutoTopicCreation.from_json(value).to_json()

    routes = [
        ("deduplication", "deduplication_enabled", parse_bool),
        ("messageTTL", "message_ttl_seconds", parse_ttl),
        ("schemaCompatibilityStrategy", "schema_compatibility_strategy", parse_strategy),
        ("autoTopicCreation", "auto_topic_creation", parse_auto),
        ("maxProducersPerTopic", "max_producers_per_topic", parse_limit),
        ("maxConsumersPerTopic", "max_consumers_per_topic", parse_limit),
        ("maxConsumersPerSubscription", "max_consumers_per_subscription", parse_limit),
        ("maxTopicsPerNamespace", "max_topics_per_namespace", parse_limit),
    ]
    base = "/admin/v2/namespaces/{tenant}/{namespace}"
    for path, field, parse in routes:
        read, write, remove = policy(field, parse)
        app.router.add_get(f"{base}/{path}", read)
        app.router.add_post(f"{base}/{path}", write)
        app.router.add_put(f"{base}/{path}", write)
        app.router.add_delete(f"{base}/{path}", remove)

    @translate_errors
    async def get_retention(request):
        p = registry().policies(ns(request))
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
        registry().update_policy(ns(request), retention_time_minutes=minutes, retention_size_mb=size_mb)
        service.apply_policies(ns(request))
        return no_content()

    @translate_errors
    async def remove_retention(request):
        registry().update_policy(ns(request), retention_time_minutes=None, retention_size_mb=None)
        service.apply_policies(ns(request))
        return no_content()

    def quota_kind(request) -> str:
        kind = request.query.get("backlogQuotaType", backlog_quota.SIZE)
        if kind not in backlog_quota.KINDS:
            raise ValueError(f"backlogQuotaType must be one of {', '.join(backlog_quota.KINDS)}")
        return kind

    @translate_errors
    async def get_backlog_quotas(request):
        return web.json_response(registry().policies(ns(request)).backlog_quota_map or {})

    @translate_errors
    async def set_backlog_quota(request):
        kind = quota_kind(request)
        quota = backlog_quota.BacklogQuota.from_json(await json_body(request))
        quotas = dict(registry().policies(ns(request)).backlog_quota_map or {})
        quotas[kind] = quota.to_json()
        registry().update_policy(ns(request), backlog_quota_map=quotas)
        return no_content()

    @translate_errors
    async def remove_backlog_quota(request):
        kind = quota_kind(request)
        quotas = dict(registry().policies(ns(request)).backlog_quota_map or {})
        quotas.pop(kind, None)
        registry().update_policy(ns(request), backlog_quota_map=quotas or None)
        return no_content()

    app.router.add_get(f"{base}/backlogQuotaMap", get_backlog_quotas)
    app.router.add_post(f"{base}/backlogQuota", set_backlog_quota)
    app.router.add_delete(f"{base}/backlogQuota", remove_backlog_quota)
    app.router.add_get(f"{base}/retention", get_retention)
    app.router.add_post(f"{base}/retention", set_retention)
    app.router.add_delete(f"{base}/retention", remove_retention)

    app.router.add_get("/admin/v2/tenants", list_tenants)
    app.router.add_get("/admin/v2/tenants/{tenant}", get_tenant)
    app.router.add_put("/admin/v2/tenants/{tenant}", put_tenant)
    app.router.add_post("/admin/v2/tenants/{tenant}", post_tenant)
    app.router.add_delete("/admin/v2/tenants/{tenant}", delete_tenant)
    app.router.add_get("/admin/v2/namespaces/{tenant}", list_namespaces)
    app.router.add_get(base, get_namespace)
    app.router.add_put(base, put_namespace)
    app.router.add_delete(base, delete_namespace)
