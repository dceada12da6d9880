"""Topic names as the connector handles them: always ``persistent://tenant/namespace/local``.

Offsets are keyed by the full name of each topic partition (``...-partition-N``), or by the
topic's own name when it is not partitioned; the ``topic`` / ``partition`` columns carry the
base name and the partition number (-1 for a non-partitioned topic).
"""

from __future__ import annotations

from functools import lru_cache

from magnetar.broker.topic_name import PARTITION_SUFFIX, TopicName


@lru_cache(maxsize=1024)
def full_name(topic: str) -> str:
    """``my-topic`` -> ``persistent://public/default/my-topic``; refuses non-persistent topics."""
    parsed = TopicName.parse(topic.strip())  # raises InvalidTopicName, a ValueError
    if not parsed.persistent:
        raise ValueError(f"only persistent topics carry a message index, not {topic!r}")
    return str(parsed)


@lru_cache(maxsize=1024)
def split_partition(name: str) -> tuple[str, int]:
    """``(base name, partition)`` of a full name; partition -1 when it is not a partition."""
    parsed = TopicName.parse(name)
    base = parsed.partitioned_base()
    return (name, -1) if base is None else (str(base), parsed.partition_index)


def partition_name(base: str, partition: int) -> str:
    return f"{base}{PARTITION_SUFFIX}{partition}"


def namespace_of(name: str) -> str:
    """``tenant/namespace`` of a full name."""
    tenant, namespace, _ = name.removeprefix("persistent://").split("/")
    return f"{tenant}/{namespace}"


def local_name(name: str) -> str:
    return name.removeprefix("persistent://").split("/")[2]
