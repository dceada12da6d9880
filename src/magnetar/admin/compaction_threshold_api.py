"""Pulsar's compaction threshold paths: a namespace's ``.../namespaces/{t}/{ns}/compactionThreshold``
(GET, PUT; DELETE unsets it) and a topic's ``.../persistent/{t}/{ns}/{topic}/compactionThreshold``
(GET, POST; DELETE; GET with ``?applied=true`` answers what applies: the topic's, else its
namespace's, else the broker's ``broker_service_compaction_threshold_in_bytes``). The body is a
number of bytes; 0 turns compaction by threshold off, a negative number is refused with 412
``compactionThreshold must be 0 or more``, as Pulsar's. Not set: 204 with no body."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import json_body, no_content, topic_of, translate_errors
from magnetar.broker.compaction_policies import parse_threshold
from magnetar.broker.topic import PersistentTopic

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.protocol.topic_name import TopicName

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/compactionThreshold"


def add_routes(app: web.Application, service: BrokerService) -> None:
    def ns(request: web.Request) -> str:
        return f"{request.match_info['tenant']}/{request.match_info['namespace']}"

    @translate_errors
    async def get_namespace(request):
        threshold = service.namespaces.policies(ns(request)).compaction_threshold
        return no_content() if threshold is None else web.json_response(threshold)

    @translate_errors
    async def set_namespace(request):
        name = ns(request)
        service.namespaces.policies(name)  # 404 first
        threshold = parse_threshold(await json_body(request))
        service.namespaces.update_policy(name, compaction_threshold=threshold)
        service.apply_policies(name)
        return no_content()

    @translate_errors
    async def remove_namespace(request):
        name = ns(request)
        service.namespaces.update_policy(name, compaction_threshold=None)
        service.apply_policies(name)
        return no_content()

    @translate_errors
    async def get_topic(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        if request.query.get("applied", "false").lower() == "true":
            return web.json_response(service.compaction_threshold(topic))
        own = service.resources.topic_compaction_thresholds.get(topic)
        return no_content() if own is None else web.json_response(own)

    @translate_errors
    async def set_topic(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        threshold = parse_threshold(await json_body(request))
        service.resources.topic_compaction_thresholds.set(topic, threshold)
        _prepare_loaded(service, topic)
        return no_content()

    @translate_errors
    async def remove_topic(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        service.resources.topic_compaction_thresholds.remove(topic)
        _prepare_loaded(service, topic)
        return no_content()

    app.router.add_get(NAMESPACE, get_namespace)
    app.router.add_put(NAMESPACE, set_namespace)
    app.router.add_post(NAMESPACE, set_namespace)
    app.router.add_delete(NAMESPACE, remove_namespace)
    app.router.add_get(TOPIC, get_topic)
    app.router.add_post(TOPIC, set_topic)
    app.router.add_put(TOPIC, set_topic)
    app.router.add_delete(TOPIC, remove_topic)


def _prepare_loaded(service: BrokerService, topic: TopicName) -> None:
    """The topic (or each partition of it) loaded here gets its ``__compaction`` cursor at once if
    a threshold now applies (BrokerService.prepare_compaction)."""
    for loaded in list(service.topics.values()):
        name = loaded.name
        if isinstance(loaded, PersistentTopic) and (name == topic or name.partitioned_base() == topic):
            service.prepare_compaction(loaded)
