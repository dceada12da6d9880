"""The broker's own admin paths: ``/admin/v2/brokers/health`` and ``/admin/v2/broker-stats/topics``,
answered for the whole broker when it is several workers (every_worker.py).

Health is "ok" only if every worker is serving: a broker one of whose workers is down serves only
part of its bundles (until the supervisor has it back), and a probe should see that, not whichever
worker the kernel handed it to. ``broker-stats/topics`` is Pulsar's "every topic's stats by
namespace": ``{namespace: {bundle: {"persistent" | "non-persistent": {topic: stats}}}}`` over the
loaded topics; with workers each worker's loaded topics are in bundles it owns, so the parts fit
together without overlapping. With 100,000 topics loaded their stats are read on the loop 100 at a
time (``topic_slices``), the loop serving everyone else between slices, and the JSON is made on a
thread (issue 40).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.admin import every_worker
from magnetar.admin.errors import reason_error
from magnetar.admin.stats_api import topic_stats
from magnetar.broker.errors import BrokerError
from magnetar.broker.topic_slices import READ_SLICE, in_slices

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

TopicsByNamespace = dict[str, dict[str, dict[str, dict[str, Any]]]]


def add_routes(app: web.Application, service: BrokerService) -> None:
    async def health(request: web.Request) -> web.Response:
        if every_worker.gathers(service, request):
            down = [p for p in await every_worker.other_parts(service, request) if not p.ok]
            if down:
                named = ", ".join(f"{p.worker} ({p.missing or f'HTTP {p.status}'})" for p in down)
                raise reason_error(web.HTTPServiceUnavailable, f"not every worker is serving: {named}")
        return web.Response(text="ok")

    async def topics(request: web.Request) -> web.Response:
        found = await loaded_topics_stats(service)
        if every_worker.gathers(service, request):
            for part in await every_worker.other_parts(service, request):
                if not part.ok:
                    why = part.missing or f"HTTP {part.status}"
                    raise reason_error(web.HTTPServiceUnavailable, f"{part.worker} gave no stats: {why}")
                merge(found, json.loads(part.body))
        body = await asyncio.get_running_loop().run_in_executor(None, lambda: json.dumps(found).encode())
        return web.Response(body=body, content_type="application/json")

    app.router.add_get("/admin/v2/brokers/health", health)
    app.router.add_get("/admin/v2/broker-stats/topics", topics)


async def loaded_topics_stats(service: BrokerService) -> TopicsByNamespace:
    """This process's loaded topics' stats, by namespace, bundle and domain, ``READ_SLICE`` topics
    at a time (a topic unloaded meanwhile is left out)."""
    found: TopicsByNamespace = {}
    names = service.namespace_service
    for part in in_slices(service.topics, READ_SLICE):
        for key, topic in part:
            name = topic.name
            try:
                bundle = names.bundle_of(name).range
            except BrokerError:  # its namespace is being deleted: the topic is going too
                continue
            domain = "persistent" if name.persistent else "non-persistent"
            by_domain = found.setdefault(name.namespace_name, {}).setdefault(bundle, {})
            by_domain.setdefault(domain, {})[key] = topic_stats(topic)
        await asyncio.sleep(0)
    return found


def merge(into: TopicsByNamespace, part: TopicsByNamespace) -> None:
    """Add another worker's ``part`` (its own bundles' topics) to ``into``."""
    for namespace, bundles in part.items():
        for bundle, domains in bundles.items():
            for domain, topics in domains.items():
                into.setdefault(namespace, {}).setdefault(bundle, {}).setdefault(domain, {}).update(topics)
