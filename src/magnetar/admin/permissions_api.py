"""Pulsar's admin v2 permission paths: grant, list and revoke a role's actions on a namespace
(``/admin/v2/namespaces/{tenant}/{ns}/permissions/{role}``) or on one topic
(``/admin/v2/persistent/{tenant}/{ns}/{topic}/permissions/{role}``, and non-persistent).

Grants are kept in the namespace's policies (``auth_policies``); a change re-checks the open
producers and consumers of the namespace (``BrokerService.recheck_permissions``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import json_body, no_content, topic_of, translate_errors
from magnetar.broker.authorization import parse_actions
from magnetar.broker.errors import BrokerError
from magnetar.protocol import wire

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


class PermissionsNotSet(BrokerError):
    """Revoking a topic-level grant that is not there: Pulsar's 412."""

    code = wire.NotAllowedError


def add_routes(app: web.Application, service: BrokerService) -> None:
    _namespace_routes(app, service)
    for domain in ("persistent", "non-persistent"):
        _topic_routes(app, service, domain)


def _ns(request: web.Request) -> str:
    return f"{request.match_info['tenant']}/{request.match_info['namespace']}"


def _namespace_routes(app: web.Application, service: BrokerService) -> None:
    @translate_errors
    async def get_namespace_permissions(request):
        grants = service.namespaces.auth_policies(_ns(request))
        return web.json_response({r: sorted(a) for r, a in sorted(grants.namespace_auth.items())})

    @translate_errors
    async def grant_on_namespace(request):
        name = _ns(request)
        actions = parse_actions(await json_body(request))
        grants = service.namespaces.auth_policies(name)
        grants.namespace_auth[request.match_info["role"]] = actions
        service.namespaces.set_auth_policies(name, grants)
        service.recheck_permissions(name)
        return no_content()

    @translate_errors
    async def revoke_on_namespace(request):
        name = _ns(request)
        grants = service.namespaces.auth_policies(name)
        grants.namespace_auth.pop(request.match_info["role"], None)
        service.namespaces.set_auth_policies(name, grants)
        service.recheck_permissions(name)
        return no_content()

    base = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
    app.router.add_get(base, get_namespace_permissions)
    app.router.add_post(f"{base}/{{role}}", grant_on_namespace)
    app.router.add_delete(f"{base}/{{role}}", revoke_on_namespace)


def _topic_routes(app: web.Application, service: BrokerService, domain: str) -> None:
    @translate_errors
    async def get_topic_permissions(request):
        topic = topic_of(request, domain)
        grants = service.namespaces.auth_policies(topic.namespace_name)
        return web.json_response(grants.topic_permissions(str(topic)))

    @translate_errors
    async def grant_on_topic(request):
        topic = topic_of(request, domain)
        actions = parse_actions(await json_body(request))
        grants = service.namespaces.auth_policies(topic.namespace_name)
        grants.destination_auth.setdefault(str(topic), {})[request.match_info["role"]] = actions
        service.namespaces.set_auth_policies(topic.namespace_name, grants)
        service.recheck_permissions(topic.namespace_name)
        return no_content()

    @translate_errors
    async def revoke_on_topic(request):
        topic = topic_of(request, domain)
        role = request.match_info["role"]
        grants = service.namespaces.auth_policies(topic.namespace_name)
        roles = grants.destination_auth.get(str(topic), {})
        if role not in roles:
            raise PermissionsNotSet("Permissions are not set at the topic level")
        del roles[role]
        if not roles:
            del grants.destination_auth[str(topic)]
        service.namespaces.set_auth_policies(topic.namespace_name, grants)
        service.recheck_permissions(topic.namespace_name)
        return no_content()

    base = f"/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}/permissions"
    app.router.add_get(base, get_topic_permissions)
    app.router.add_post(f"{base}/{{role}}", grant_on_topic)
    app.router.add_delete(f"{base}/{{role}}", revoke_on_topic)
