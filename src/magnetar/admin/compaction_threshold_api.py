"""Pulsar's compaction threshold paths: a namespace's ``.../namespaces/{t}/{ns}/compactionThreshold``
(GET, PUT; DELETE unsets it) and a topic's ``.../persistent/{t}/{ns}/{topic}/compactionThreshold``
(GET, POST; DELETE; GET with ``?applied=true`` answers what applies: the topic's, else its
namespace's, else the broker's ``broker_service_compaction_threshold_in_bytes``). The body is a
number of bytes; 0 turns compaction by threshold off, a negative number is refused with 412
``compactionThreshold must be 0 or more``, as Pulsar's. Not set: 204 with no body."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.policy_routes import add_namespace_policy, add_topic_policy
from magnetar.broker.compaction_policies import parse_threshold
from magnetar.broker.topic import PersistentTopic

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.protocol.topic_name import TopicName

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/compactionThreshold"


def add_routes(app: web.Application, service: BrokerService) -> None:
    def parse(body: object, _tenant: str) -> int:
        return parse_threshold(body)

    add_namespace_policy(
        app, service, NAMESPACE, "compaction_threshold", parse, on_change=service.apply_policies
    )
    add_topic_policy(
        app,
        service,
        TOPIC,
        service.resources.topic_compaction_thresholds,
        parse,
        service.compaction_threshold,
        on_change=lambda topic: _prepare_loaded(service, topic),
    )


def _prepare_loaded(service: BrokerService, topic: TopicName) -> None:
    """The topic (or each partition of it) loaded here gets its ``__compaction`` cursor at once if
    a threshold now applies (BrokerService.prepare_compaction)."""
    for loaded in list(service.topics.values()):
        name = loaded.name
        if isinstance(loaded, PersistentTopic) and (name == topic or name.partitioned_base() == topic):
            service.prepare_compaction(loaded)
