"""A subscription's consumers one page at a time (Magnetar's own path; topic stats list at most
``STATS_CONSUMERS`` of a broadcast subscription's consumers, which may be 100K):

``GET /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/subscription/{sub}/consumers
?offset=0&limit=100``

Answers ``{"total", "offset", "limit", "consumers": [...], "next"}``: ``total`` counts the
connected consumers and then, on a broadcast subscription, the virtual cursors kept for those
whose connection was lost (``"detached": true``), in that order: connected ones in subscribe
order, detached ones in the order they left. ``limit`` is at most ``PAGE_LIMIT``; ``next`` is
the path of the next page, null on the last. Offsets are positions in a list that changes as
consumers come and go, so a consumer may move between pages while they are read. A partitioned
topic is paged per partition (its ``-partition-N`` name). Authorization as for topic stats
(``lookup``: produce or consume).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import quote

from aiohttp import web

from magnetar.admin import spread_stats
from magnetar.admin.errors import single_topic, translate_errors
from magnetar.broker.dispatchers import broadcast_stats
from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.errors import SubscriptionNotFound
from magnetar.broker.follower_topic import link_worker

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.dispatchers.virtual_cursor import VirtualCursor
    from magnetar.broker.service import BrokerService
    from magnetar.storage.managed_ledger import ManagedLedger

PATH = "/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}/subscription/{{subscription}}/consumers"


def _time(seconds: float) -> str | None:
    """Pulsar's ``connectedSince`` form; None for "never" (0)."""
    if not seconds:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat(timespec="milliseconds")


def _positions(ml: ManagedLedger | None, vc: VirtualCursor) -> dict:
    return {
        "markDeletePosition": str(vc.mark_delete),
        "readPosition": str(vc.read_position),
        "msgBacklog": broadcast_stats.backlog(ml, vc) if ml is not None else 0,
        "lastAckedTimestamp": int(vc.last_ack * 1000),
    }


def connected_entry(consumer: Consumer, vc: VirtualCursor | None, ml: ManagedLedger | None) -> dict:
    traffic = consumer.traffic
    entry = {
        "consumerName": consumer.name,
        "address": consumer.address,
        "detached": False,
        "msgRateOut": traffic.rate_out,
        "msgThroughputOut": traffic.throughput_out,
        "msgOutCounter": traffic.messages_out,
        "bytesOutCounter": traffic.bytes_out,
        "availablePermits": consumer.permits,
        "unackedMessages": len(consumer.pending_acks),
    }
    if vc is not None:
        entry["connectedSince"] = _time(vc.connected_since)
        entry.update(_positions(ml, vc))
    return entry


def detached_entry(
    name: str, vc: VirtualCursor, timer: asyncio.TimerHandle, ml: ManagedLedger, loop_now: float
) -> dict:
    return {
        "consumerName": name,
        "detached": True,
        "connectedSince": _time(vc.connected_since),
        **_positions(ml, vc),
        "keptForSeconds": round(max(0.0, timer.when() - loop_now), 3),
    }


def consumer_page(subscription, offset: int, limit: int, loop_now: float, links: bool = True) -> dict:
    """One page of ``subscription``'s consumers (connected, then detached virtual cursors);
    ``links`` False: the other workers' links left out (a spread topic's owner, spread_stats.py)."""
    start, stop = broadcast_stats.page_bounds(offset, limit)
    dispatcher = subscription.dispatcher
    ml = subscription.topic.ml
    if isinstance(dispatcher, BroadcastDispatcher):
        cursors = dispatcher.consumers
        detached = dispatcher.detached
        if links:
            connected_items: Collection = cursors.items()
            detached_items: Collection = detached.items()
        else:
            connected_items = [(c, vc) for c, vc in cursors.items() if link_worker(c.name) is None]
            detached_items = [(name, kept) for name, kept in detached.items() if link_worker(name) is None]
        connected = broadcast_stats.page(connected_items, start, stop)
        entries = [connected_entry(c, vc, ml) for c, vc in connected]
        total = len(connected_items) + len(detached_items)
        if len(entries) < stop - start and detached_items:
            first = max(0, start - len(connected_items))
            wanted = stop - start - len(entries)
            entries += [
                detached_entry(name, vc, timer, ml, loop_now)
                for name, (vc, timer) in broadcast_stats.page(detached_items, first, first + wanted)
            ]
    else:
        consumers = list(subscription.consumers)
        total = len(consumers)
        entries = [connected_entry(c, None, ml) for c in consumers[start:stop]]
    return {"total": total, "offset": start, "limit": stop - start, "consumers": entries}


def add_routes(app: web.Application, service: BrokerService) -> None:
    for domain in ("persistent", "non-persistent"):

        @translate_errors
        async def consumers(request: web.Request, domain: str = domain) -> web.Response:
            topic = single_topic(service, request, domain, "ask for each partition's")
            name = request.match_info["subscription"]
            subscription = topic.subscriptions.get(name)
            if subscription is None:
                raise SubscriptionNotFound(f"Subscription {name} not found on topic {topic.name}")
            offset = int(request.query.get("offset", "0"))
            limit = int(request.query.get("limit", str(broadcast_stats.PAGE_DEFAULT)))
            now = asyncio.get_running_loop().time()
            if spread_stats.merges(service, topic.name) and isinstance(
                subscription.dispatcher, BroadcastDispatcher
            ):
                answer = await spread_stats.every_workers_page(
                    service,
                    request,
                    topic.name,
                    name,
                    consumer_page(subscription, offset, limit, now, links=False),
                )
            else:
                answer = consumer_page(subscription, offset, limit, now)
            end = answer["offset"] + len(answer["consumers"])
            here = request.rel_url.raw_path
            answer["next"] = f"{here}?offset={end}&limit={answer['limit']}" if end < answer["total"] else None
            return web.json_response(answer)

        app.router.add_get(PATH.format(domain=domain), consumers)


def page_path(domain: str, topic: str, subscription: str, offset: int, limit: int) -> str:
    """The path of a page, for topic stats to point at (``topic``: ``tenant/namespace/local``)."""
    return (
        f"/admin/v2/{domain}/{topic}/subscription/{quote(subscription, safe='')}/consumers"
        f"?offset={offset}&limit={limit}"
    )
