"""Pulsar topic names: ``{persistent|non-persistent}://tenant/namespace/local-name``.

A short name like ``my-topic`` means ``persistent://public/default/my-topic``, as in Pulsar.
A partition of a partitioned topic is named ``<topic>-partition-<n>``.

The one reading of topic names for every side: the broker and the admin API check them with
``TopicName.parse``, the client and the Spark connector complete and split them here too.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import crc32c

PARTITION_SUFFIX = "-partition-"
DOMAINS = ("persistent", "non-persistent")
#: Longest topic name, in characters, ``persistent://`` included. Pulsar sets none
#: (apache/pulsar#12023); a name of 100,000 characters is no name, and it would be stored,
#: logged and listed in every answer about its namespace.
MAX_TOPIC_NAME_LENGTH = 1024
_PARTITION_RE = re.compile(r"^(.*)-partition-(\d+)$")
_ALLOWED = re.compile(r"^[A-Za-z0-9_.:=\-%]+$")


class InvalidTopicName(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        if not name:
            raise InvalidTopicName("topic name is empty")
        if not isinstance(name, str):
            raise InvalidTopicName("topic name is not valid UTF-8")
        if len(name) > MAX_TOPIC_NAME_LENGTH:
            raise InvalidTopicName(
                f"topic name of {len(name)} characters exceeds the limit of {MAX_TOPIC_NAME_LENGTH}"
            )
        name = full_topic_name(name)
        domain, _, rest = name.partition("://")
        if domain not in DOMAINS:
            raise InvalidTopicName(f"invalid topic domain {domain!r} in {name!r}")
        parts = rest.split("/")
        if len(parts) != 3 or not all(parts):
            raise InvalidTopicName(f"topic name {name!r} must be domain://tenant/namespace/topic")
        tenant, namespace, local = parts
        for part in parts:
            if not _ALLOWED.match(part):
                raise InvalidTopicName(f"invalid character in topic name {name!r}")
        # Interned: a broker holds a name per loaded topic (100,000 of them), and they share a
        # few domains, tenants and namespaces (about 180 bytes a topic as copies).
        return cls(sys.intern(domain), sys.intern(tenant), sys.intern(namespace), local)

    @property
    def persistent(self) -> bool:
        return self.domain == "persistent"

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        return split_partition(self.local_name)[1]

    def partitioned_base(self) -> TopicName | None:
        """The partitioned topic this partition belongs to (None if not a partition name)."""
        base, index = split_partition(self.local_name)
        if index < 0:
            return None
        return TopicName(self.domain, self.tenant, self.namespace, base)

    def partition(self, index: int) -> TopicName:
        """Partition ``index`` of this (partitioned) topic: ``<topic>-partition-<index>``."""
        return TopicName(self.domain, self.tenant, self.namespace, partition_name(self.local_name, index))

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"


def full_topic_name(name: str) -> str:
    """A short name completed, as Pulsar reads it: ``my-topic`` ->
    ``persistent://public/default/my-topic``, ``t/ns/x`` -> ``persistent://t/ns/x``; a name with
    a domain is returned as it is (``TopicName.parse`` checks the rest)."""
    if "://" in name:
        return name
    parts = name.split("/")
    if len(parts) == 1:
        return f"persistent://public/default/{name}"
    if len(parts) == 3:
        return f"persistent://{name}"
    raise InvalidTopicName(
        f"invalid short topic name {name!r}: use 'name', 'tenant/namespace/name' or a full name"
    )


def partition_name(topic: str, index: int) -> str:
    """The name of partition ``index`` of ``topic``: ``<topic>-partition-<index>``."""
    return f"{topic}{PARTITION_SUFFIX}{index}"


def split_partition(name: str) -> tuple[str, int]:
    """``(the partitioned topic's name, the index)`` of a partition's name; ``(name, -1)`` for
    any other name."""
    m = _PARTITION_RE.match(name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)


def split_topic_pattern(pattern: str) -> tuple[str, str, str]:
    """``(domain, "tenant/namespace", full pattern)`` of a regex over topic names. A pattern
    completes as a short name does (``orders-.*`` is ``persistent://public/default/orders-.*``);
    InvalidTopicName unless it is then ``domain://tenant/namespace/regex``."""
    full = full_topic_name(pattern)
    domain, _, rest = full.partition("://")
    parts = rest.split("/", 2)
    if domain not in DOMAINS or len(parts) != 3 or not all(parts):
        raise InvalidTopicName(f"topic pattern {pattern!r} must be [domain://]tenant/namespace/regex")
    return domain, f"{parts[0]}/{parts[1]}", full


def topics_hash(topics: list[str]) -> str:
    """A digest of a topic list, so a polling client learns cheaply that nothing changed."""
    digest = 0
    for name in sorted(topics):
        digest = crc32c.crc32c(name.encode(), digest)
    return f"{digest:08x}"


def filter_topics(topics: list[str], pattern: str) -> list[str] | None:
    """The topics a regex subscription's ``pattern`` takes, as a broker filters them for
    GET_TOPICS_OF_NAMESPACE's ``topics_pattern`` (Pulsar's ``TopicList.filterTopics``): the pattern
    without its ``domain://``, matched whole against each name without its domain and without a
    partition's suffix (a partitioned topic is taken with every partition). None when the pattern
    is no regex this side can read (the client then filters the whole list itself)."""
    _, separator, rest = pattern.partition("://")
    try:
        compiled = re.compile(rest if separator else pattern)
    except re.error:
        return None
    out = []
    for name in topics:
        base = split_partition(name)[0]
        if compiled.fullmatch(base.partition("://")[2]):
            out.append(name)
    return out
