"""Pulsar's admin v2 paths of topics and namespaces, and the forms of a message id the admin
calls accept."""

from __future__ import annotations

import urllib.parse
from typing import Any

from magnetar.protocol.message_id import message_id_fields
from magnetar.protocol.topic_name import PARTITION_SUFFIX, TopicName, partition_name


def indexed_topic(topic: str) -> TopicName:
    """``topic`` (short names as Pulsar reads them) if it can have a message index: a persistent
    topic; InvalidTopicName or ValueError otherwise."""
    parsed = TopicName.parse(topic)
    if not parsed.persistent:
        raise ValueError(f"only persistent topics have a message index, not {topic!r}")
    return parsed


def quote(part: str) -> str:
    """One part of a path (a tenant, a role, a subscription), quoted."""
    return urllib.parse.quote(part, safe="")


def topic_path(topic: str, partition: int = -1) -> str:
    """``/admin/v2/{domain}/{tenant}/{namespace}/{topic}`` of a topic of either domain; given
    ``partition`` (>= 0), of that partition unless ``topic`` names one already."""
    parsed = TopicName.parse(topic)
    local = parsed.local_name
    if partition >= 0 and PARTITION_SUFFIX not in local:
        local = partition_name(local, partition)
    parts = (parsed.tenant, parsed.namespace, local)
    return f"/admin/v2/{parsed.domain}/" + "/".join(quote(p) for p in parts)


def index_topic_path(topic: str, partition: int = -1) -> str:
    """``topic_path`` of a topic that can have a message index (``indexed_topic``)."""
    return topic_path(str(indexed_topic(topic)), partition)


def namespace_parts(namespace: str) -> str:
    """``tenant/namespace``, each part quoted for a path."""
    tenant, _, name = namespace.partition("/")
    if not tenant or not name or "/" in name:
        raise ValueError(f"a namespace is tenant/namespace, not {namespace!r}")
    return f"{quote(tenant)}/{quote(name)}"


def namespace_path(namespace: str) -> str:
    return f"/admin/v2/namespaces/{namespace_parts(namespace)}"


def message_id_parts(message_id: Any) -> tuple[int, int, int, int]:
    """(ledger, entry, batch index, partition) of a message id in any of the accepted forms."""
    if isinstance(message_id, dict):
        return message_id_fields(message_id)
    if isinstance(message_id, tuple | list):
        ledger, entry, *rest = message_id
        return int(ledger), int(entry), int(rest[0]) if rest else -1, -1
    # magnetar.client.MessageId and the official pulsar.MessageId name their parts alike.
    return (
        message_id.ledger_id(),
        message_id.entry_id(),
        message_id.batch_index(),
        message_id.partition() if hasattr(message_id, "partition") else -1,
    )
