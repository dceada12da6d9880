"""Pulsar's inactive-topic policies: whether a topic nobody uses is deleted, after how long, and
which topics count as deletable (``InactiveTopicPolicies``, with Pulsar's JSON); set per topic, per
namespace, or by the broker's ``broker_delete_inactive_topics_*`` settings, in that order.

Neither mode ever deletes a topic with a durable subscription's backlog:
``delete_when_no_subscriptions`` deletes only a topic with no subscription at all (its data then
waits for nobody), ``delete_when_subscriptions_caught_up`` one whose every subscription has
acknowledged everything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from magnetar.protocol.topic_name import TopicName

DeleteMode = Literal["delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"]
NO_SUBSCRIPTIONS: DeleteMode = "delete_when_no_subscriptions"
CAUGHT_UP: DeleteMode = "delete_when_subscriptions_caught_up"
DELETE_MODES: tuple[DeleteMode, ...] = (NO_SUBSCRIPTIONS, CAUGHT_UP)


@dataclass(frozen=True)
class InactiveTopicPolicies:
    """Pulsar's InactiveTopicPolicies."""

    inactive_topic_delete_mode: DeleteMode = NO_SUBSCRIPTIONS
    max_inactive_duration_seconds: float = 60.0
    delete_while_inactive: bool = False

    def to_json(self) -> dict[str, Any]:
        seconds = self.max_inactive_duration_seconds
        return {
            "inactiveTopicDeleteMode": self.inactive_topic_delete_mode,
            "maxInactiveDurationSeconds": int(seconds) if float(seconds).is_integer() else seconds,
            "deleteWhileInactive": self.delete_while_inactive,
        }

    @classmethod
    def from_json(cls, data: Any) -> InactiveTopicPolicies:
        """Pulsar's JSON, checked (ValueError says what is wrong); missing fields take Pulsar's
        defaults (mode delete_when_no_subscriptions, 60 s ... not deleting)."""
        if not isinstance(data, dict):
            raise ValueError("inactive topic policies must be a JSON object")
        mode = data.get("inactiveTopicDeleteMode", NO_SUBSCRIPTIONS)
        if mode not in DELETE_MODES:
            raise ValueError(f"inactiveTopicDeleteMode must be one of {', '.join(DELETE_MODES)}")
        seconds = data.get("maxInactiveDurationSeconds", 60)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            raise ValueError("maxInactiveDurationSeconds must be a positive number of seconds")
        delete = data.get("deleteWhileInactive", False)
        if not isinstance(delete, bool):
            raise ValueError("deleteWhileInactive must be true or false")
        return cls(mode, float(seconds), delete)


def _key(topic: TopicName) -> str:
    return f"topic-inactive-policies/{topic.partitioned_base() or topic}"


class TopicInactivePolicies:
    """Topics' own inactive-topic policies (a partitioned topic's apply to its partitions),
    durable in the metadata store."""

    def __init__(self, metadata: Any) -> None:
        self._kv = metadata

    def get(self, topic: TopicName) -> InactiveTopicPolicies | None:
        raw = self._kv.get(_key(topic))
        return InactiveTopicPolicies.from_json(json.loads(raw)) if raw is not None else None

    def set(self, topic: TopicName, policies: InactiveTopicPolicies) -> None:
        self._kv.put(_key(topic), json.dumps(policies.to_json()))

    def remove(self, topic: TopicName) -> None:
        self._kv.delete(_key(topic))
