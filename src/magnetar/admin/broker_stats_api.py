"""Pulsar's ``GET /admin/v2/broker-stats/topics`` (``pulsar-admin broker-stats topics``): every
topic loaded here, by namespace, bundle and domain, each with its stats as ``.../stats`` gives them
(``{"public/default": {"0x00000000_0x40000000": {"persistent": {"persistent://...": {...}}}}}``).

With 100,000 topics loaded the stats are read on the loop a slice at a time (``topic_slices``),
the loop serving everyone else between slices, and the JSON is made on a thread (issue 40)."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import translate_errors
from magnetar.admin.stats_api import topic_stats
from magnetar.broker.topic_slices import READ_SLICE, in_slices

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

#: namespace -> bundle range -> domain -> topic -> stats
Tree = dict[str, dict[str, dict[str, dict[str, dict]]]]


async def topics_tree(service: BrokerService) -> Tree:
    """The loaded topics' stats, ``topic_slices.READ_SLICE`` topics at a time."""
    tree: Tree = {}
    bundles = service.namespace_service
    for part in in_slices(service.topics, READ_SLICE):
        for key, topic in part:
            name = topic.name
            bundle = bundles.bundle_of(name).range
            domain = "persistent" if topic.ml is not None else "non-persistent"
            by_domain = tree.setdefault(name.namespace_name, {}).setdefault(bundle, {})
            by_domain.setdefault(domain, {})[key] = topic_stats(topic)
        await asyncio.sleep(0)
    return tree


def add_routes(app: web.Application, service: BrokerService) -> None:
    @translate_errors
    async def topics(request: web.Request) -> web.Response:
        tree = await topics_tree(service)
        body = await asyncio.get_running_loop().run_in_executor(None, lambda: json.dumps(tree).encode())
        return web.Response(body=body, content_type="application/json")

    app.router.add_get("/admin/v2/broker-stats/topics", topics)
