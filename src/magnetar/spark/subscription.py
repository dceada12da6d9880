"""The durable subscription that follows a stream's committed offsets.

Retention deletes only what every durable subscription has consumed, so a stream that has
not committed an index yet must hold a subscription before it: created (at the earliest
message, which protects everything) when the query starts, then moved forward with
cumulative acknowledgements as Spark commits offsets. It never reads: its consumer is parked
with a receiver queue of one message.
"""

from __future__ import annotations

import hashlib
import json
import logging

from magnetar.client import Client, Consumer, ConsumerType, InitialPosition, MessageId
from magnetar.client.admin import AdminClient
from magnetar.spark import probes
from magnetar.spark.options import ReadOptions
from magnetar.spark.retry import RetryPolicy

log = logging.getLogger(__name__)


def default_subscription_name(options: ReadOptions) -> str:
    """``spark-magnetar-<hash>`` of what the query reads, so a restarted query finds its own.

    Spark tells a source neither its query id nor its checkpoint; two queries reading the same
    topics with the same start options share this name, so give them ``subscriptionName``.
    """
    identity = {
        "service_url": options.service_url,
        "topics": list(options.selection.topics),
        "pattern": options.selection.pattern,
        "starting": options.starting,
        "startingTimestamp": options.starting_timestamp,
    }
    digest = hashlib.sha1(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return f"spark-magnetar-{digest}"


class CommitSubscription:
    def __init__(self, client: Client, admin: AdminClient, retry: RetryPolicy, name: str) -> None:
        self.client = client
        self.admin = admin
        self.retry = retry
        self.name = name
        self._consumers: dict[str, Consumer] = {}

    def hold(self, topic: str) -> None:
        """Make sure the subscription exists on ``topic`` (at the earliest message when new)."""
        if topic not in self._consumers:
            self._consumers[topic] = self.retry.call(  # the options' policy, across broker restarts
                lambda: self.client.subscribe(
                    topic,
                    self.name,
                    consumer_type=ConsumerType.Failover,  # a restarted query's planner may overlap
                    initial_position=InitialPosition.Earliest,
                    receiver_queue_size=1,
                ),
                f"subscription {self.name} on {topic}",
            )

    def advance(self, topic: str, next_index: int) -> None:
        """Acknowledge every entry made only of messages with indexes below ``next_index``."""
        if next_index <= 0:
            return
        target = self._entry_before(topic, next_index)
        if target is None:
            return
        self.hold(topic)
        self._consumers[topic].acknowledge_cumulative(target)

    def _entry_before(self, topic: str, next_index: int) -> MessageId | None:
        following = probes.message_id_at(self.admin, topic, next_index)
        if following is not None:
            if following.entry_id() <= 0:
                return None  # the previous entry is in another ledger: wait for the next commit
            return MessageId(following.partition(), following.ledger_id(), following.entry_id() - 1)
        last = probes.message_id_at(self.admin, topic, next_index - 1)
        if last is None:
            return None
        return MessageId(last.partition(), last.ledger_id(), last.entry_id())

    def close(self) -> None:
        for consumer in self._consumers.values():
            try:
                consumer.close()
            except Exception:
                log.debug("closing the commit consumer failed", exc_info=True)
        self._consumers.clear()
