"""Pulsar's compaction paths: ``PUT .../persistent/{t}/{ns}/{topic}/compaction`` starts a compaction
(204; 409 while one is running, as Pulsar), ``GET`` the same path answers its status as Pulsar's
``LongRunningProcessStatus`` JSON (``status``: NOT_RUN, RUNNING, SUCCESS or ERROR; ``lastError``).
On a partitioned topic the PUT starts one on every partition, as Pulsar's does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import (
    no_content,
    partitions_of,
    persistent,
    reason_error,
    single_topic,
    topic_of,
    translate_errors,
)

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

PATH = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction"
ALREADY_RUNNING = "Compaction already in progress"


def add_routes(app: web.Application, service: BrokerService) -> None:
    @translate_errors
    async def trigger(request):
        name = topic_of(request, "persistent")
        if service.namespaces.partitions(str(name)):
            topics = [
                persistent(service.get_topic(partition, create=False))
                for partition in partitions_of(service, request, "persistent")
            ]
        else:
            topics = [persistent(single_topic(service, request, "persistent", ""))]
        executor = service.compaction_executor
        if any(topic.compaction.running for topic in topics):
            raise reason_error(web.HTTPConflict, ALREADY_RUNNING)
        for topic in topics:
            topic.compaction.start(executor)
        return no_content()

    @translate_errors
    async def status(request):
        topic = persistent(
            single_topic(service, request, "persistent", "ask for the status of each partition")
        )
        compaction = topic.compaction
        return web.json_response({"status": compaction.status.value, "lastError": compaction.last_error})

    app.router.add_put(PATH, trigger)
    app.router.add_get(PATH, status)
