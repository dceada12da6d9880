"""Pulsar's admin v2 paths for topics: partitioned-topic metadata, creation, listing, termination."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import (
    json_body,
    no_content,
    partitions_of,
    single_topic,
    topic_of,
    translate_errors,
)

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


def add_routes(app: web.Application, service: BrokerService) -> None:
    for domain in ("persistent", "non-persistent"):
        base = f"/admin/v2/{domain}/{{tenant}}/{{namespace}}"

        def handlers(domain: str = domain):
            @translate_errors
            async def create_partitioned(request):
                count = await json_body(request)
                if not isinstance(count, int) or count < 1:
                    raise ValueError("the body must be the number of partitions, at least 1")
                service.create_partitioned_topic(topic_of(request, domain), count)
                return no_content()

            @translate_errors
            async def update_partitioned(request):
                count = await json_body(request)
                if not isinstance(count, int) or count < 1:
                    raise ValueError("the body must be the number of partitions, at least 1")
                service.update_partitioned_topic(topic_of(request, domain), count)
                return no_content()

            @translate_errors
            async def get_partitioned(request):
                name = topic_of(request, domain)
                service.check_namespace(name)
                return web.json_response({"partitions": service.namespaces.partitions(str(name))})

            @translate_errors
            async def delete_partitioned(request):
                service.delete_partitioned_topic(topic_of(request, domain))
                return no_content()

            @translate_errors
            async def create_topic(request):
                service.create_topic(topic_of(request, domain))
                return no_content()

            @translate_errors
            async def delete_topic(request):
                service.delete_topic(topic_of(request, domain))
                return no_content()

            @translate_errors
            async def list_topics(request):
                m = request.match_info
                namespace = f"{m['tenant']}/{m['namespace']}"
                service.namespaces.policies(namespace)
                prefix = f"{domain}://"
                return web.json_response(
                    [t for t in service.topics_of_namespace(namespace) if t.startswith(prefix)]
                )

            @translate_errors
            async def list_partitioned(request):
                m = request.match_info
                namespace = f"{m['tenant']}/{m['namespace']}"
                service.namespaces.policies(namespace)
                return web.json_response(service.namespaces.partitioned_topics(namespace, domain))

            return locals()

        h = handlers()
        app.router.add_get(base, h["list_topics"])
        app.router.add_get(f"{base}/partitioned", h["list_partitioned"])
        app.router.add_put(f"{base}/{{topic}}/partitions", h["create_partitioned"])
        app.router.add_post(f"{base}/{{topic}}/partitions", h["update_partitioned"])
        app.router.add_get(f"{base}/{{topic}}/partitions", h["get_partitioned"])
        app.router.add_delete(f"{base}/{{topic}}/partitions", h["delete_partitioned"])
        app.router.add_put(f"{base}/{{topic}}", h["create_topic"])
        app.router.add_delete(f"{base}/{{topic}}", h["delete_topic"])

    def message_id_json(position, partition: int) -> dict:
        return {"ledgerId": position.ledger_id, "entryId": position.entry_id, "partitionIndex": partition}

    @translate_errors
    async def terminate(request):
        topic = single_topic(
            service, request, "persistent", "terminate its partitions (.../terminate/partitions)"
        )
        return web.json_response(message_id_json(await topic.terminate(), topic.name.partition_index))

    @translate_errors
    async def terminate_partitions(request):
        topics = [
            service.get_topic(partition, create=False)
            for partition in partitions_of(service, request, "persistent")
        ]
        positions = await asyncio.gather(*(topic.terminate() for topic in topics))
        last = {
            str(topic.name.partition_index): position
            for topic, position in zip(topics, positions, strict=True)
        }
        return web.json_response({i: message_id_json(position, int(i)) for i, position in last.items()})

    topic_base = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    app.router.add_post(f"{topic_base}/terminate", terminate)
    app.router.add_post(f"{topic_base}/terminate/partitions", terminate_partitions)
