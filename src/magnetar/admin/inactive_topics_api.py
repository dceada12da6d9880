"""Pulsar's inactive-topic policy paths: a namespace's ``.../namespaces/{t}/{ns}/inactiveTopicPolicies``
and a topic's ``.../persistent/{t}/{ns}/{topic}/inactiveTopicPolicies`` (GET, POST, DELETE; a topic's
GET with ``?applied=true`` answers what applies: its own, else its namespace's, else the broker's).
The body is Pulsar's InactiveTopicPolicies JSON (broker/inactive_topic_policies.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.policy_routes import add_namespace_policy, add_topic_policy
from magnetar.broker.inactive_topic_policies import InactiveTopicPolicies

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}/inactiveTopicPolicies"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/inactiveTopicPolicies"


def add_routes(app: web.Application, service: BrokerService) -> None:
    # A namespace keeps the policies as their JSON, a topic as InactiveTopicPolicies.
    add_namespace_policy(
        app,
        service,
        NAMESPACE,
        "inactive_topic_policies",
        lambda body, _tenant: InactiveTopicPolicies.from_json(body).to_json(),
    )
    add_topic_policy(
        app,
        service,
        TOPIC,
        service.resources.topic_inactive_policies,
        lambda body, _tenant: InactiveTopicPolicies.from_json(body),
        lambda topic: service.inactive_topic_policies(topic).to_json(),
        show=InactiveTopicPolicies.to_json,
    )
