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

Paths about metadata only (namespaces, partition counts, schemas, lookups, a topic's bundle) are
served by whichever worker gets them: the metadata store is shared.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from magnetar.admin.errors import Handler, reason_error
from magnetar.broker.errors import BrokerError
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.ownership import BrokerInfo
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

PROXIED_BY = "X-Magnetar-Proxied-By"
#: Headers a proxy must not pass on (hop by hop, or recomputed for the new request).
_HOP_HEADERS = frozenset(
    h.lower() for h in ("Host", "Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Upgrade")
)
#: Topic paths whose answer is the shared metadata, served anywhere.
_METADATA_SUFFIXES = ("/bundle", "/partitions")
TIMEOUT_S = 60.0


def owner_of_request(service: BrokerService, request: web.Request) -> BrokerInfo | None:
    """The worker that must serve ``request``; None where any may (no topic or bundle named, a
    partitioned topic's own name, metadata only, a bundle nobody owns)."""
    info = request.match_info
    path = request.path
    if "bundle" in info and path.startswith("/admin/v2/namespaces/"):
        bundle = f"{info['tenant']}/{info['namespace']}/{info['bundle']}"
        return service.namespace_service.store.owner(bundle)
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
    session: list[aiohttp.ClientSession] = []

    @web.middleware
    async def proxy(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not service.shares_bundles:
            return await handler(request)
        owner = owner_of_request(service, request)
        me = service.namespace_service.broker_id
        if owner is None or owner.broker_id == me:
            return await handler(request)
        if PROXIED_BY in request.headers:
            raise reason_error(
                web.HTTPServiceUnavailable, f"{request.path} is being moved to {owner.broker_id}"
            )
        if not session:
            session.append(aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)))
        return await forward(session[0], request, owner, me)

    async def close(app: web.Application) -> None:
        for one in session:
            await one.close()

    return proxy, close


async def forward(
    session: aiohttp.ClientSession, request: web.Request, owner: BrokerInfo, me: str
) -> web.StreamResponse:
    """``request`` as ``owner`` answers it (503 if it cannot be reached: a worker restarting)."""
    base = owner.web_url or owner.web_url_tls
    if base is None:
        raise reason_error(web.HTTPServiceUnavailable, f"{owner.broker_id} serves no HTTP port")
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
    headers[PROXIED_BY] = me
    body = await request.read()
    try:
        async with session.request(
            request.method,
            base + request.path_qs,
            headers=headers,
            data=body or None,
            allow_redirects=False,
            ssl=False,  # the owner's own certificate on this machine; the client checked ours
        ) as answer:
            payload = await answer.read()
            kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_HEADERS}
            kept.pop("Content-Encoding", None)  # aiohttp decoded the body
            return web.Response(status=answer.status, body=payload, headers=kept)
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("proxying %s %s to %s failed: %s", request.method, request.path, owner.broker_id, exc)
        raise reason_error(
            web.HTTPServiceUnavailable, f"{owner.broker_id} cannot be reached: {exc}"
        ) from None
