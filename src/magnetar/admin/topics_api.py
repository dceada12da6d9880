"""Pulsar's admin v2 paths for topics: partitioned-topic metadata, creation, listing, termination."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import (
    json_body,
    no_content,
    partitions_of,
    persistent,
    single_topic,
    topic_of,
    translate_errors,
)
from magnetar.admin.partition_fanout import each_partition

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.protocol.topic_name import TopicName


def add_routes(app: web.Application, service: BrokerService) -> None:
    for domain in ("persistent", "non-persistent"):
        _listing_routes(app, service, domain)
        _partitioned_routes(app, service, domain)
        _topic_routes(app, service, domain)
    _termination_routes(app, service)


def _base(domain: str) -> str:
    return f"/admin/v2/{domain}/{{tenant}}/{{namespace}}"


def _namespace(service: BrokerService, request: web.Request) -> str:
    """The namespace a request names (404 if there is no such namespace)."""
    m = request.match_info
    namespace = f"{m['tenant']}/{m['namespace']}"
    service.namespaces.policies(namespace)
    return namespace


def _listing_routes(app: web.Application, service: BrokerService, domain: str) -> None:
    @translate_errors
    async def list_topics(request):
        namespace = _namespace(service, request)
        prefix = f"{domain}://"
        # Listed and encoded off the loop: a namespace may hold 100,000 topics.
        body = await service.listing_topics(
            namespace, None, lambda topics: json.dumps([t for t in topics if t.startswith(prefix)])
        )
        return web.Response(text=body, content_type="application/json")

    @translate_errors
    async def list_partitioned(request):
        namespace = _namespace(service, request)
        return web.json_response(service.namespaces.partitioned_topics(namespace, domain))

    app.router.add_get(_base(domain), list_topics)
    app.router.add_get(f"{_base(domain)}/partitioned", list_partitioned)


async def _partition_count(request: web.Request) -> int:
    count = await json_body(request)
    if not isinstance(count, int) or count < 1:
        raise ValueError("the body must be the number of partitions, at least 1")
    return count


def _partitioned_routes(app: web.Application, service: BrokerService, domain: str) -> None:
    @translate_errors
    async def create_partitioned(request):
        count = await _partition_count(request)
        service.create_partitioned_topic(topic_of(request, domain), count)
        return no_content()

    @translate_errors
    async def update_partitioned(request):
        count = await _partition_count(request)
        service.update_partitioned_topic(topic_of(request, domain), count)
        return no_content()

    @translate_errors
    async def get_partitioned(request):
        name = topic_of(request, domain)
        service.check_namespace(name)
        return web.json_response({"partitions": service.namespaces.partitions(str(name))})

    @translate_errors
    async def delete_partitioned(request):
        name = topic_of(request, domain)
        if service.shares_bundles:  # each partition deleted by its owner, then the topic
            names = partitions_of(service, request, domain)
            await each_partition(
                service, request, names, _delete_stored, method="DELETE", suffix="", missing_ok=True
            )
        service.delete_partitioned_topic(name)
        return no_content()

    def _delete_stored(partition: TopicName) -> None:
        if service.catalog.exists(str(partition)):
            service.delete_topic(partition)

    path = f"{_base(domain)}/{{topic}}/partitions"
    app.router.add_put(path, create_partitioned)
    app.router.add_post(path, update_partitioned)
    app.router.add_get(path, get_partitioned)
    app.router.add_delete(path, delete_partitioned)


def _topic_routes(app: web.Application, service: BrokerService, domain: str) -> None:
    @translate_errors
    async def create_topic(request):
        service.create_topic(topic_of(request, domain))
        return no_content()

    @translate_errors
    async def delete_topic(request):
        service.delete_topic(topic_of(request, domain))
        return no_content()

    app.router.add_put(f"{_base(domain)}/{{topic}}", create_topic)
    app.router.add_delete(f"{_base(domain)}/{{topic}}", delete_topic)


def _message_id_json(position, partition: int) -> dict:
    return {"ledgerId": position.ledger_id, "entryId": position.entry_id, "partitionIndex": partition}


def _termination_routes(app: web.Application, service: BrokerService) -> None:
    @translate_errors
    async def terminate(request):
        topic = persistent(
            single_topic(
                service, request, "persistent", "terminate its partitions (.../terminate/partitions)"
            )
        )
        return web.json_response(_message_id_json(await topic.terminate(), topic.name.partition_index))

    @translate_errors
    async def terminate_partitions(request):
        names = partitions_of(service, request, "persistent")

        async def terminate_one(name: TopicName) -> dict:
            topic = persistent(service.get_topic(name, create=False))
            return _message_id_json(await topic.terminate(), name.partition_index)

        last = await each_partition(service, request, names, terminate_one, suffix="/terminate")
        by_index = {str(name.partition_index): one for name, one in zip(names, last, strict=True)}
        return web.json_response(by_index)

    topic_base = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    app.router.add_post(f"{topic_base}/terminate", terminate)
    app.router.add_post(f"{topic_base}/terminate/partitions", terminate_partitions)
