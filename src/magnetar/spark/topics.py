"""Topic names as the connector handles them: always ``persistent://tenant/namespace/local``.

Offsets are keyed by the full name of each topic partition (``...-partition-N``), or by the
topic's own name when it is not partitioned; the ``topic`` / ``partition`` columns carry the
base name and the partition number (-1 for a non-partitioned topic).
"""

from __future__ import annotations

import re
from functools import lru_cache

PARTITION_SUFFIX = "-partition-"
_PARTITION_RE = re.compile(r"^(.*)-partition-(\d+)$")


@lru_cache(maxsize=1024)
def full_name(topic: str) -> str:
    """``my-topic`` -> ``persistent://public/default/my-topic``; refuses non-persistent topics."""
    name = topic.strip()
    domain = "persistent"
    if "://" in name:
        domain, _, name = name.partition("://")
    if domain != "persistent":
        raise ValueError(f"only persistent topics carry a message index, not {topic!r}")
    parts = name.split("/")
    if len(parts) == 1:
        parts = ["public", "default", *parts]
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"invalid topic name {topic!r}")
    return "persistent://" + "/".join(parts)


def split_partition(name: str) -> tuple[str, int]:
    """``(base name, partition)`` of a full name; partition -1 when it is not a partition."""
    match = _PARTITION_RE.match(name)
    if match is None:
        return name, -1
    return match.group(1), int(match.group(2))


def partition_name(base: str, partition: int) -> str:
    return f"{base}{PARTITION_SUFFIX}{partition}"


def namespace_of(name: str) -> str:
    """``tenant/namespace`` of a full name."""
    tenant, namespace, _ = name.removeprefix("persistent://").split("/")
    return f"{tenant}/{namespace}"


def local_name(name: str) -> str:
    return name.removeprefix("persistent://").split("/")[2]
