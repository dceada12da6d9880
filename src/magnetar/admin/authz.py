"""Authorization of admin HTTP requests, after authentication (auth.py): which right each admin v2
path needs, as Pulsar's admin resources ask it, and 403 with Pulsar's ``{"reason": ...}`` when the
request's role lacks it.

Superusers may call everything; tenants are the superusers' (list, create, update, delete), and so
are clusters (list, get); a tenant's admins may call everything on its namespaces and topics (grants
included); other roles may read a topic's stats and metadata with ``produce`` or ``consume``, list a
namespace's topics with either on the namespace, and use subscriptions and peek messages with
``consume``. The WebSocket API's producers need ``produce`` and its consumers and readers
``consume``; REST produce needs ``produce``, and a role without it gets 401, not 403, as Pulsar's
``TopicsBase.validateProducePermission`` answers. The web console's own paths (console_api.py) need a
valid role, and its page of a namespace's topics what listing them needs.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.auth import ROLE
from magnetar.broker.authorization import ADMIN, CONSUME, LOOKUP, PRODUCE, Authorizer
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SUPERUSER = "superuser"
TENANT_ADMIN = "tenant_admin"
LIST_TOPICS = "list_topics"
OPEN = "open"

#: What a topic path's tail (after ``{topic}``) needs, by method ("*": any method).
_TOPIC_TAILS: dict[tuple[str, str], str] = {
    ("GET", "partitions"): LOOKUP,
    ("GET", "bundle"): LOOKUP,
    ("GET", "stats"): LOOKUP,
    ("GET", "partitioned-stats"): LOOKUP,
    ("GET", "internalStats"): LOOKUP,
    ("*", "subscriptions"): CONSUME,
    ("*", "subscription"): CONSUME,
    ("*", "all_subscription"): CONSUME,
    ("*", "ledger"): CONSUME,
    ("*", "messageid"): CONSUME,
    ("*", "index"): CONSUME,
}


#: REST produce's paths (PIP-64).
REST_PRODUCE_PREFIX = "/topics/"
#: What each WebSocket endpoint needs (``/ws/v2/{producer|consumer|reader}/{domain}/...``).
_WEBSOCKET = {"producer": PRODUCE, "consumer": CONSUME, "reader": CONSUME}


def requirement(method: str, canonical: str) -> tuple[str, str | None]:
    """(what is needed, the topic domain for topic paths) for a route's pattern, e.g.
    ``/admin/v2/persistent/{tenant}/{namespace}/{topic}/stats`` -> (LOOKUP, "persistent")."""
    method = "GET" if method == "HEAD" else method
    parts = canonical.strip("/").split("/")
    if parts[0] == "metrics":
        return OPEN, None  # authenticated is enough, as Pulsar's metrics servlet
    if parts[:3] == ["lookup", "v2", "topic"] and len(parts) == 7:
        return LOOKUP, parts[3]  # Pulsar's TopicLookup: the lookup permission
    if parts[:2] == ["ws", "v2"] and len(parts) >= 7 and parts[2] in _WEBSOCKET:
        return _WEBSOCKET[parts[2]], parts[3]  # Pulsar's WebSocket handlers: produce, or consume
    if parts[0] == "topics" and len(parts) >= 5:
        return PRODUCE, parts[1]  # REST produce (PIP-64)
    if parts[:2] != ["admin", "v2"] or len(parts) < 3:
        return SUPERUSER, None
    area, rest = parts[2], parts[3:]
    if area == "console":  # the web console's own paths (console_api.py)
        if rest[:1] == ["topics"] and len(rest) == 3:
            return LIST_TOPICS, None  # a page of a namespace's topics: as listing them
        return OPEN, None  # who am I, the broker at a glance (as /metrics), what may I list
    if area in ("tenants", "brokers", "clusters"):
        return SUPERUSER, None
    if area == "namespaces" and rest:
        return TENANT_ADMIN, None
    if area in ("persistent", "non-persistent") and len(rest) >= 2:
        if len(rest) == 2 or (len(rest) == 3 and rest[2] == "partitioned"):
            return LIST_TOPICS, None
        tail = rest[3] if len(rest) > 3 else ""
        if method == "GET" and tail == "subscription" and rest[-1] == "consumers" and len(rest) == 6:
            return LOOKUP, area  # a subscription's consumers: stats, as .../stats (consumers_api.py)
        need = _TOPIC_TAILS.get((method, tail)) or _TOPIC_TAILS.get(("*", tail)) or ADMIN
        return need, area
    if area == "schemas" and len(rest) >= 4:
        if method == "GET" or rest[3] in ("compatibility", "version"):
            return LOOKUP, "persistent"
        return (PRODUCE if method == "POST" else ADMIN), "persistent"
    return SUPERUSER, None


def _rest_produce_refusal(role: str, path: str, match: dict[str, str]) -> str:
    """Pulsar's words for a REST produce request without ``produce`` (its client data aside)."""
    domain = path.split("/")[2]
    topic = f"{domain}://{match.get('tenant')}/{match.get('namespace')}/{match.get('topic')}"
    return f"Unauthorized to produce to topic {topic} with clientAppId [{role}]"


def _operation_name(need: str) -> str:
    return {LOOKUP: "LOOKUP", CONSUME: "CONSUME", PRODUCE: "PRODUCE", ADMIN: "ADMIN"}[need]


def allowed(authz: Authorizer, role: str, method: str, canonical: str, match: dict[str, str]) -> str | None:
    """None if ``role`` may make this request, else the reason it may not (Pulsar's wording)."""
    if authz.is_superuser(role):
        return None
    need, domain = requirement(method, canonical)
    tenant = match.get("tenant", "")
    if need == OPEN:
        return None
    if need == SUPERUSER:
        return "This operation requires super-user access"
    if need == TENANT_ADMIN:
        if authz.is_tenant_admin(tenant, role):
            return None
        return "Don't have permission to administrate resources on this tenant"
    namespace = f"{tenant}/{match.get('namespace', '')}"
    if need == LIST_TOPICS:
        if authz.can_list_topics(namespace, role):
            return None
        operation = "validateNamespaceOperation for operation [GET_TOPICS]"
        return f"Unauthorized to {operation} on namespace [{namespace}]"
    try:
        topic = TopicName.parse(f"{domain}://{namespace}/{match.get('topic', '')}")
    except InvalidTopicName:
        return None  # the handler answers 400
    if authz.can_topic(topic, role, need):
        return None
    operation = f"validateTopicOperation for operation [{_operation_name(need)}]"
    return f"Unauthorized to {operation} on topic [{topic}]"


def middleware(service: BrokerService, failures: Counter[str]):
    """Refuse (403) requests whose authenticated role lacks the right; a request with no role
    (authentication off, or an open /metrics) is not checked."""

    @web.middleware
    async def authorize(request: web.Request, handler: Handler) -> web.StreamResponse:
        authz = service.authorization
        role = request.get(ROLE)
        route = request.match_info.route
        if authz is None or role is None or route.resource is None:
            return await handler(request)
        reason = allowed(authz, role, request.method, route.resource.canonical, dict(request.match_info))
        if reason is None:
            return await handler(request)
        failures["admin"] += 1
        status = 403
        if route.resource.canonical.startswith(REST_PRODUCE_PREFIX):
            status, reason = 401, _rest_produce_refusal(role, request.path, dict(request.match_info))
        log.info("%s %s by %r: %d: %s", request.method, request.path, role, status, reason)
        return web.json_response({"reason": reason}, status=status)

    return authorize
