"""A spread topic's stats as one topic's (docs/architecture.md, the spread): every consumer of its
broadcast subscriptions, whichever worker serves it.

The owner's subscription has, besides the consumers it serves, one consumer per other worker
that serves some: that worker's link (``magnetar.spread.<worker>``). Pulsar's user expects the
consumers, not the links; so the owner, answering a topic's stats (or a partition's, for
``partitioned-stats``), leaves the links out of its own part and asks every other worker for
what it serves of the topic (``FOLLOWED``: the same topic path ending ``/stats/followed``, on the
worker's own HTTP port, answered by whichever worker gets it) and puts it in: each worker's
consumers listed (up to ``STATS_CONSUMERS`` in all) and counted, its deliveries added, and
``msgBacklog`` the backlog of the slowest consumer of any worker (what the stored cursor waits
for). A worker that gives no part (restarting) is named in ``spreadWorkersMissing``.

The paged list of a subscription's consumers (consumers_api.py) goes on the same way: the owner's
consumers, then each other worker's in worker order (``FOLLOWED`` with ``subscription``,
``offset`` and ``limit``: that worker's own page), each naming its ``worker``.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.every_worker import PART_TIMEOUT_S, expected_workers, other_parts
from magnetar.admin.owner_calls import OWNER_CALLS
from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.dispatchers.broadcast_stats import STATS_CONSUMERS, backlog
from magnetar.broker.follower_topic import link_worker

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.service import BrokerService
    from magnetar.protocol.topic_name import TopicName

#: The path (after the topic's) of a worker's part of a spread topic's stats.
FOLLOWED = "/stats/followed"
#: A subscription's delivery fields, added over the workers.
_OUT = ("msgRateOut", "msgThroughputOut", "msgOutCounter", "bytesOutCounter")
#: A broadcast subscription's consumer counts, added over the workers.
_COUNTS = ("consumersCount", "detachedCount")


def merges(service: BrokerService, topic: TopicName) -> bool:
    """Whether the stats of ``topic`` answered here take in the other workers' parts: a spread
    topic (asked by a client, or for it by the worker it reached: a part is asked on ``FOLLOWED``)."""
    return service.shares_bundles and service.spread.is_spread(topic)


def links(subscription) -> list[Consumer]:
    """The other workers' links among ``subscription``'s consumers (a pass over them)."""
    return [c for c in subscription.consumers if link_worker(c.name) is not None]


def slowest_backlog(subscription) -> int | None:
    """The largest backlog of a consumer this worker serves of a broadcast ``subscription``
    (those whose connection was lost, kept for their grace, included; links not); None with none."""
    dispatcher = subscription.dispatcher
    if not isinstance(dispatcher, BroadcastDispatcher):
        return None
    ml = subscription.topic.ml
    backlogs = [
        backlog(ml, vc) for consumer, vc in dispatcher.consumers.items() if link_worker(consumer.name) is None
    ]
    backlogs += [
        backlog(ml, vc) for name, (vc, _) in dispatcher.detached.items() if link_worker(name) is None
    ]
    return max(backlogs, default=None)


def path_of(topic: TopicName) -> str:
    return f"/admin/v2/{topic.domain}/{topic.tenant}/{topic.namespace}/{topic.local_name}{FOLLOWED}"


async def followed_parts(
    service: BrokerService, request: web.Request, topic: TopicName
) -> dict[str, dict | None]:
    """Every other worker's part of ``topic``'s stats, by worker; None for one that gave none."""
    parts: dict[str, dict | None] = {}
    for part in await other_parts(service, request, path_of(topic)):
        parts[part.worker] = json.loads(part.body) if part.ok else None
    return parts


def merge(stats: dict, owner: str, parts: dict[str, dict | None]) -> dict:
    """``stats`` (those of ``owner``, links left out, each broadcast subscription's
    ``slowestBacklog`` of its own consumers) with each worker's part put in; each consumer names
    the worker that serves it (``worker``), and the topic its owner (``ownerBroker``, Pulsar's
    field). Pure: tested without a network."""
    missing = sorted(worker for worker, part in parts.items() if part is None)
    subscriptions = stats["subscriptions"]
    stats["ownerBroker"] = owner
    for sub in subscriptions.values():
        for consumer in sub["consumers"]:
            consumer["worker"] = owner
    for worker, part in parts.items():
        for name, theirs in (part or {}).get("subscriptions", {}).items():
            for consumer in theirs["consumers"]:
                consumer["worker"] = worker
            ours = subscriptions.get(name)
            if ours is None or "consumersCount" not in ours:
                continue  # gone at the owner meanwhile, or not a broadcast one there
            for field in (*_OUT, *_COUNTS):
                ours[field] = ours.get(field, 0) + theirs.get(field, 0)
            for field in _OUT:  # the topic's deliveries are its subscriptions'
                stats[field] = stats.get(field, 0) + theirs.get(field, 0)
            room = STATS_CONSUMERS - len(ours["consumers"])
            ours["consumers"].extend(theirs["consumers"][: max(0, room)])
            ours["consumersListed"] = len(ours["consumers"])
            slowest = theirs.get("slowestBacklog")
            if slowest is not None:
                ours["slowestBacklog"] = max(ours.get("slowestBacklog") or 0, slowest)
    for sub in subscriptions.values():
        slowest = sub.pop("slowestBacklog", None)
        if slowest is not None:
            sub["msgBacklog"] = slowest
    if missing:
        stats["spreadWorkersMissing"] = missing
    return stats


async def every_workers_page(
    service: BrokerService, request: web.Request, topic: TopicName, subscription: str, own: dict
) -> dict:
    """A page of ``subscription``'s consumers on every worker: ``own`` (the owner's page, links
    left out) followed by each other worker's consumers, in worker order."""
    start, limit = own["offset"], own["limit"]
    me = service.namespace_service.broker_id
    entries = [dict(entry, worker=me) for entry in own["consumers"]]
    total = own["total"]
    missing = []
    live = {info.broker_id: info for info in service.namespace_service.store.brokers()}
    calls = request.app[OWNER_CALLS]
    for worker in expected_workers(service):
        if worker == me:
            continue
        info = live.get(worker)
        if info is None:
            missing.append(worker)
            continue
        wanted = limit - len(entries)
        query = {
            "subscription": subscription,
            "offset": str(max(0, start - total)),
            "limit": str(max(1, wanted)),
        }
        try:
            call = calls.call(request, info, "GET", path_of(topic), query=query)
            status, body, _ = await asyncio.wait_for(call, PART_TIMEOUT_S)
        except (TimeoutError, web.HTTPException):
            status, body = 0, b""
        if not 200 <= status < 300:
            missing.append(worker)
            continue
        part = json.loads(body)
        total += part["total"]
        entries += [dict(entry, worker=worker) for entry in part["consumers"][: max(0, wanted)]]
    answer = {"total": total, "offset": start, "limit": limit, "consumers": entries}
    if missing:
        answer["spreadWorkersMissing"] = missing
    return answer
