"""A partitioned topic's own admin paths with workers: each partition is served by its owner.

The partitions of one topic live on several workers, and only a partition's owner may open its
managed ledger (two writers on one ledger would corrupt it). So a path on the partitioned topic's
name (``partitioned-stats``, the subscription paths, ``terminate/partitions``, the delete) runs
each partition's part where it is owned: here if this worker owns it, else as the same path on
the partition's own name sent to the owner (owner_calls.py), and the handler puts the parts
together as it does for one process. Alone (no shared owners), every part runs here.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.admin.owner_calls import OWNER_CALLS, OwnerAnswer

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.protocol.topic_name import TopicName

#: A partition's part here: its answer's JSON (None: no content), or an awaitable of it.
Local = Callable[["TopicName"], "Any | Awaitable[Any]"]


def partition_path(request: web.Request, partition: TopicName) -> str:
    """``request``'s path with the partitioned topic's name replaced by ``partition``'s."""
    info = request.match_info
    domain = request.path.split("/")[3]
    prefix = f"/admin/v2/{domain}/{info['tenant']}/{info['namespace']}/{info['topic']}"
    if not request.path.startswith(prefix):
        raise ValueError(f"{request.path} does not name a topic")
    return (
        f"/admin/v2/{domain}/{partition.tenant}/{partition.namespace}/{partition.local_name}"
        + (request.path[len(prefix) :])
    )


async def each_partition(
    service: BrokerService,
    request: web.Request,
    partitions: list[TopicName],
    local: Local,
    method: str | None = None,
    suffix: str | None = None,
    missing_ok: bool = False,
) -> list[Any]:
    """Each partition's answer, in order: ``local(partition)`` where it is owned here, else the
    owner's answer to ``method`` (the request's) on the partition's path (``suffix`` after the
    partition's name instead of the request's own). ``missing_ok``: an owner's 404 is None."""
    body = await request.read()
    me = service.namespace_service.broker_id if service.shares_bundles else None

    async def one(partition: TopicName) -> Any:
        owner = service.owner_of(partition)
        if owner is None or owner.broker_id == me:
            answer = local(partition)
            return await answer if inspect.isawaitable(answer) else answer
        if suffix is None:
            path = partition_path(request, partition)
        else:
            path = f"/admin/v2/{request.path.split('/')[3]}/{partition.tenant}/{partition.namespace}/"
            path += partition.local_name + suffix
        status, payload, headers = await request.app[OWNER_CALLS].call(
            request, owner, method or request.method, path, body
        )
        if status == 404 and missing_ok:
            return None
        if status >= 300:
            raise OwnerAnswer(status, payload, headers.get("Content-Type", "").split(";")[0] or None)
        return json.loads(payload) if payload.strip() else None

    return list(await asyncio.gather(*(one(p) for p in partitions)))
