"""Pulsar's inactive-topic policy paths: a namespace's ``.../namespaces/{t}/{ns}/inactiveTopicPolicies``
and a topic's ``.../persistent/{t}/{ns}/{topic}/inactiveTopicPolicies`` (GET, POST, DELETE; a topic's
GET with ``?applied=true`` answers what applies: its own, else its namespace's, else the broker's).
The body is Pulsar's InactiveTopicPolicies JSON (broker/inactive_topic_policies.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import json_body, no_content, topic_of, translate_errors
from magnetar.broker.inactive_topic_policies import InactiveTopicPolicies

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}/inactiveTopicPolicies"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/inactiveTopicPolicies"


def add_routes(app: web.Application, service: BrokerService) -> None:
    def ns(request: web.Request) -> str:
        return f"{request.match_info['tenant']}/{request.match_info['namespace']}"

    @translate_errors
    async def get_namespace(request):
        policies = service.namespaces.policies(ns(request)).inactive_topic_policies
        return no_content() if policies is None else web.json_response(policies)

    @translate_errors
    async def set_namespace(request):
        name = ns(request)
        service.namespaces.policies(name)  # 404 first
        policies = InactiveTopicPolicies.from_json(await json_body(request))
        service.namespaces.update_policy(name, inactive_topic_policies=policies.to_json())
        return no_content()

    @translate_errors
    async def remove_namespace(request):
        service.namespaces.update_policy(ns(request), inactive_topic_policies=None)
        return no_content()

    @translate_errors
    async def get_topic(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        if request.query.get("applied", "false").lower() == "true":
            return web.json_response(service.inactive_topic_policies(topic).to_json())
        own = service.resources.topic_inactive_policies.get(topic)
        return no_content() if own is None else web.json_response(own.to_json())

    @translate_errors
    async def set_topic(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        policies = InactiveTopicPolicies.from_json(await json_body(request))
        service.resources.topic_inactive_policies.set(topic, policies)
        return no_content()

    @translate_errors
    async def remove_topic(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        service.resources.topic_inactive_policies.remove(topic)
        return no_content()

    for path, read, write, remove in (
        (NAMESPACE, get_namespace, set_namespace, remove_namespace),
        (TOPIC, get_topic, set_topic, remove_topic),
    ):
        app.router.add_get(path, read)
        app.router.add_post(path, write)
        app.router.add_put(path, write)
        app.router.add_delete(path, remove)
