"""Pulsar's paths for namespace bundles and lookups: a namespace's bundles, unloading and splitting
one, the bundle of a topic, and the HTTP lookup of a topic's owner (``LookupData``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import no_content, topic_of, translate_errors
from magnetar.admin.owner_calls import OWNER_CALLS, OwnerAnswer
from magnetar.broker.bundles import RANGE_EQUALLY_DIVIDE
from magnetar.broker.ownership import BrokerInfo

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

BASE = "/admin/v2/namespaces/{tenant}/{namespace}"
#: A bundle as paths name it, ``0x00000000_0x40000000`` (so no policy path is taken for one).
BUNDLE = "{bundle:0[xX][0-9a-fA-F]+_0[xX][0-9a-fA-F]+}"


def add_routes(app: web.Application, service: BrokerService, web_urls) -> None:
    """``web_urls()``: this broker's own (http, https) URLs, which a lookup answers name."""

    def namespace_of(request: web.Request) -> str:
        name = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
        service.namespaces.policies(name)  # 404 if there is no such namespace
        return name

    @translate_errors
    async def get_bundles(request):
        return web.json_response(service.namespace_service.bundles(namespace_of(request)).to_json())

    @translate_errors
    async def unload_bundle(request):
        namespace = namespace_of(request)
        bundle = service.namespace_service.bundle(namespace, request.match_info["bundle"])
        await service.namespace_service.unload(bundle)
        return no_content()

    @translate_errors
    async def unload_namespace(request):
        """Each bundle unloaded by its owner (a worker unloads only what it owns)."""
        namespace = namespace_of(request)
        ns_service = service.namespace_service
        for bundle in ns_service.bundles(namespace).bundles:
            owner = ns_service.store.owner(str(bundle)) if service.shares_bundles else None
            if owner is None or owner.broker_id == ns_service.broker_id:
                await ns_service.unload(bundle)
                continue
            path = f"/admin/v2/namespaces/{namespace}/{bundle.range}/unload"
            status, body, headers = await request.app[OWNER_CALLS].call(request, owner, "PUT", path)
            if status >= 300:
                raise OwnerAnswer(status, body, headers.get("Content-Type", "").split(";")[0] or None)
        return no_content()

    @translate_errors
    async def split_bundle(request):
        namespace = namespace_of(request)
        algorithm = request.query.get("splitAlgorithmName") or RANGE_EQUALLY_DIVIDE
        if algorithm != RANGE_EQUALLY_DIVIDE:
            raise ValueError(f"Unsupported split algorithm {algorithm}: only {RANGE_EQUALLY_DIVIDE}")
        ns_service = service.namespace_service
        halves = ns_service.split(ns_service.bundle(namespace, request.match_info["bundle"]))
        if request.query.get("unload", "false").lower() == "true":
            for half in halves:
                await ns_service.unload(half)
        return no_content()

    app.router.add_get(f"{BASE}/bundles", get_bundles)
    app.router.add_put(f"{BASE}/unload", unload_namespace)
    app.router.add_put(f"{BASE}/{BUNDLE}/unload", unload_bundle)
    app.router.add_put(f"{BASE}/{BUNDLE}/split", split_bundle)
    for domain in ("persistent", "non-persistent"):
        _topic_routes(app, service, web_urls, domain)


def lookup_data(owner: BrokerInfo) -> dict[str, str | None]:
    """Pulsar's LookupData: the owner's URLs (``nativeUrl`` is ``brokerUrl``, as Pulsar fills it)."""
    return {
        "brokerUrl": owner.service_url,
        "brokerUrlTls": owner.service_url_tls,
        "httpUrl": owner.web_url,
        "httpUrlTls": owner.web_url_tls,
        "nativeUrl": owner.service_url,
    }


def spread_answer(service: BrokerService) -> BrokerInfo:
    """What a lookup of a spread topic names: the ports every worker listens on (the service
    port for clients, the one admin port for ``httpUrl``), not the owner's own ones."""
    url, tls_url = service.shared_service_urls
    http, https = service.shared_web_urls
    return BrokerInfo("", url, tls_url, http, https)


def _topic_routes(app: web.Application, service: BrokerService, web_urls, domain: str) -> None:
    @translate_errors
    async def bundle_range(request):
        topic = topic_of(request, domain)
        bundle = service.namespace_service.bundle_of(topic)
        return web.Response(text=bundle.range, content_type="text/plain")

    @translate_errors
    async def lookup(request):
        topic = topic_of(request, domain)
        spread = service.spread
        if spread.is_spread(topic) and not spread.lookup_pinned(topic, request.remote or ""):
            # As the binary LOOKUP answers it (handlers/lookups.py): the shared port, where the
            # kernel spreads connections, so that broadcast consumers stay on the worker theirs
            # reached. Anything else is refused there, and that client's next lookup (pinned)
            # names the owner.
            return web.json_response(lookup_data(spread_answer(service)))
        owner = service.owner_of(topic)
        if owner is None:  # this broker, alone
            service.namespace_service.bundle_of(topic)  # 404 if there is no such namespace
            http, https = web_urls()
            owner = BrokerInfo("", service.service_url, service.service_url_tls, http, https)
        return web.json_response(lookup_data(owner))

    app.router.add_get(f"/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}/bundle", bundle_range)
    app.router.add_get(f"/lookup/v2/topic/{domain}/{{tenant}}/{{namespace}}/{{topic}}", lookup)
