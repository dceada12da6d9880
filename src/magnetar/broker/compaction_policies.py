"""Pulsar's ``compactionThreshold``: compact a topic by itself once the backlog of its ``__compaction``
cursor passes this many bytes (0: never by itself). Set per topic, per namespace, or by the broker's
``broker_service_compaction_threshold_in_bytes``, the first set of these applying, as in Pulsar.

The broker's compaction check (``housekeeping.check_compaction``) compares each loaded topic's
estimate (``backlog_estimate``: Pulsar's ``PersistentTopic.checkCompaction``) with the threshold
that applies to it, every ``broker_service_compaction_monitor_interval_in_seconds``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from magnetar.broker.errors import NotAllowed
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.managed_ledger import ManagedLedger

_PREFIX = "topic-compaction-threshold/"


def parse_threshold(value: Any) -> int:
    """A threshold from an admin request's JSON: a whole number of bytes; ValueError (400) if it is
    not one, NotAllowed (412, Pulsar's words) if it is negative."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("compactionThreshold must be a number of bytes")
    if value < 0:
        raise NotAllowed("compactionThreshold must be 0 or more")
    return value


def applied_threshold(own: int | None, namespace: int | None, broker: int) -> int:
    """What applies to a topic: its own threshold, else its namespace's, else the broker's."""
    if own is not None:
        return own
    return namespace if namespace is not None else broker


def backlog_estimate(
    ml: ManagedLedger, compaction_cursor: ManagedCursor | None, durable_cursors: Iterable[ManagedCursor]
) -> int:
    """Pulsar's estimate of what compaction has not read yet, in bytes: the ``__compaction``
    cursor's backlog; before the first compaction, the backlog of the durable subscription furthest
    behind, or the whole topic when it has none."""
    if compaction_cursor is not None:
        return ml.size_after(compaction_cursor.mark_delete_position)
    slowest = min((cursor.mark_delete_position for cursor in durable_cursors), default=None)
    return ml.size_bytes() if slowest is None else ml.size_after(slowest)


def _key(topic: TopicName) -> str:
    return f"{_PREFIX}{topic.partitioned_base() or topic}"


class TopicCompactionThresholds:
    """Topics' own compaction thresholds (a partitioned topic's apply to its partitions), durable
    in the metadata store."""

    def __init__(self, metadata: Any) -> None:
        self._kv = metadata

    def get(self, topic: TopicName) -> int | None:
        raw = self._kv.get(_key(topic))
        return int(raw) if raw is not None else None

    def set(self, topic: TopicName, threshold: int) -> None:
        self._kv.put(_key(topic), str(threshold))

    def remove(self, topic: TopicName) -> None:
        self._kv.delete(_key(topic))

    def all(self) -> dict[str, int]:
        """Every topic's own threshold, by topic name (a partitioned topic's by its own name):
        one query for the compaction check's pass over every loaded topic."""
        found = {}
        for key in self._kv.keys(_PREFIX):
            raw = self._kv.get(key)
            if raw is not None:
                found[key.removeprefix(_PREFIX)] = int(raw)
        return found

    @staticmethod
    def name_of(topic: TopicName) -> str:
        """The name ``all`` files ``topic``'s threshold under."""
        return str(topic.partitioned_base() or topic)
