"""One admin port for every worker: a request about a topic or a bundle that another worker owns
is served by that worker, through this one.

Every worker listens on the advertised HTTP port (SO_REUSEPORT), so a request lands on any of them;
only a topic's owner may load it (two processes appending to one ledger would corrupt it), and
only a bundle's owner can unload it. The request is proxied to the owner's own HTTP URL (its
``BrokerInfo.web_url``) rather than answered 307 as Pulsar's admin does: every HTTP client (curl
without ``-L``, urllib's refusal to follow a 307 of a PUT, the Spark connector's) keeps working,
and the owner's ports need not be reachable by the client. The proxied request carries
``PROXIED_BY``; a worker that gets one for a topic it does not own (the bundle moved meanwhile)
answers 503, as Pulsar answers a request for a bundle being moved, and never proxies it again.

WebSocket sessions (``/ws/v2/...``) and REST produce (``/topics/...``) are not proxied: the worker
that gets one serves it, with a Pulsar session to the owner of each topic (partition) it does not
own (``magnetar.websocket.sessions``), so a partitioned topic's own name is served whole.

Paths about metadata only (namespaces, partition counts, schemas, lookups, a topic's bundle) are
served by whichever worker gets them: the metadata store is shared.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import Handler, reason_error
from magnetar.admin.owner_calls import OWNER_CALLS, PROXIED_BY
from magnetar.admin.spread_stats import FOLLOWED
from magnetar.broker.errors import BrokerError
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.ownership import BrokerInfo
    from magnetar.broker.service import BrokerService

#: The WebSocket API's and REST produce's paths: served where they land (see above).
_MESSAGING = ("/ws/v2/", "/topics/")
#: Topic paths whose answer is the shared metadata, served anywhere; and a worker's own part of a
#: spread topic's stats (spread_stats.py).
_METADATA_SUFFIXES = ("/bundle", "/partitions", FOLLOWED)


def owner_of_request(service: BrokerService, request: web.Request) -> BrokerInfo | None:
    """The worker that must serve ``request``; None where any may (no topic or bundle named, a
    partitioned topic's own name, metadata only, a bundle nobody owns, the WebSocket API and
    REST produce)."""
    info = request.match_info
    path = request.path
    if "bundle" in info and path.startswith("/admin/v2/namespaces/"):
        bundle = f"{info['tenant']}/{info['namespace']}/{info['bundle']}"
        return service.namespace_service.store.owner(bundle)
    if path.startswith(_MESSAGING):
        return None
    if "topic" not in info or not path.startswith("/admin/v2/") or path.endswith(_METADATA_SUFFIXES):
        return None
    domain = path.split("/")[3]
    if domain not in ("persistent", "non-persistent"):
        return None
    try:
        topic = TopicName.parse(f"{domain}://{info['tenant']}/{info['namespace']}/{info['topic']}")
        if service.namespaces.partitions(str(topic)):
            return None  # the handler goes over the partitions (see docs/architecture.md, Workers)
        return service.owner_of(topic)
    except (InvalidTopicName, BrokerError, ValueError):
        return None  # the handler answers it as it would


def middleware(service: BrokerService):
    """The aiohttp middleware; it does nothing unless bundles are shared (workers)."""

    @web.middleware
    async def proxy(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not service.shares_bundles:
            return await handler(request)
        owner = owner_of_request(service, request)
        if owner is None or owner.broker_id == service.namespace_service.broker_id:
            return await handler(request)
        if PROXIED_BY in request.headers:
            raise reason_error(
                web.HTTPServiceUnavailable, f"{request.path} is being moved to {owner.broker_id}"
            )
        status, body, headers = await request.app[OWNER_CALLS].call(
            request, owner, request.method, request.path, await request.read()
        )
        return web.Response(status=status, body=body, headers=headers)

    return proxy
