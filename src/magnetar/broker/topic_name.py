"""Pulsar topic names: ``{persistent|non-persistent}://tenant/namespace/local-name``.

A short name like ``my-topic`` means ``persistent://public/default/my-topic``, as in Pulsar.
A partition of a partitioned topic is named ``<topic>-partition-<n>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import crc32c

PARTITION_SUFFIX = "-partition-"
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
        if "://" not in name:
            parts = name.split("/")
            if len(parts) == 1:
                name = f"persistent://public/default/{name}"
            elif len(parts) == 3:
                name = f"persistent://{name}"
            else:
                raise InvalidTopicName(f"invalid short topic name {name!r}")
        domain, _, rest = name.partition("://")
        if domain not in ("persistent", "non-persistent"):
            raise InvalidTopicName(f"invalid topic domain {domain!r} in {name!r}")
        parts = rest.split("/")
        if len(parts) != 3 or not all(parts):
            raise InvalidTopicName(f"topic name {name!r} must be domain://tenant/namespace/topic")
        tenant, namespace, local = parts
        for part in parts:
            if not _ALLOWED.match(part):
                raise InvalidTopicName(f"invalid character in topic name {name!r}")
        return cls(domain, tenant, namespace, local)

    @property
    def persistent(self) -> bool:
        return self.domain == "persistent"

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        m = _PARTITION_RE.match(self.local_name)
        return int(m.group(2)) if m else -1

    def partitioned_base(self) -> TopicName | None:
        """The partitioned topic this partition belongs to (None if not a partition name)."""
        m = _PARTITION_RE.match(self.local_name)
        if not m:
            return None
        return TopicName(self.domain, self.tenant, self.namespace, m.group(1))

    def partition(self, index: int) -> TopicName:
        """Partition ``index`` of this (partitioned) topic: ``<topic>-partition-<index>``."""
        return TopicName(self.domain, self.tenant, self.namespace, f"{self.local_name}-partition-{index}")

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"


def topics_hash(topics: list[str]) -> str:
    """A digest of a topic list, so a polling client learns cheaply that nothing changed."""
    digest = 0
    for name in sorted(topics):
        digest = crc32c.crc32c(name.encode(), digest)
    return f"{digest:08x}"
