"""Non-persistent topics (``non-persistent://``): messages go to the consumers connected now
and are never stored. A consumer without permits misses the message, as in Pulsar.

Subscriptions choose consumers the way their persistent twins do (one active consumer for
Exclusive/Failover, round robin for Shared, the key's hash owner for Key_Shared, every consumer
for Broadcast), but there is nothing to acknowledge, redeliver or seek.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatchers.key_shared import join_selector, key_shared_mode, new_selector
from magnetar.broker.dispatchers.single_active import choose_active
from magnetar.broker.dispatchers.sticky_keys import (
    AutoSplitSelector,
    StickySelector,
    sticky_key,
    sticky_key_hash,
)
from magnetar.broker.entries import DispatchEntry
from magnetar.broker.errors import BrokerError, ConsumerBusy, NotAllowed
from magnetar.broker.producer import Producer
from magnetar.broker.subscription_type import SubscriptionType, SubTypeValue
from magnetar.broker.traffic import Traffic
from magnetar.protocol import wire
from magnetar.protocol.broadcast import wants_broadcast
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.entry import Entry
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig

SubType = wire.CommandSubscribe.SubType
EXCLUSIVE, SHARED, FAILOVER, KEY_SHARED = (
    SubType.Value(n) for n in ("Exclusive", "Shared", "Failover", "Key_Shared")
)


class NonPersistentSubscription:
    durable = False
    cursor = None

    def __init__(self, topic: NonPersistentTopic, name: str, sub_type: SubTypeValue) -> None:
        self.topic = topic
        self.name = name
        self.sub_type = sub_type
        self.broadcast = False
        self.consumers: list[Consumer] = []
        self.dispatcher = None
        self.traffic = Traffic()
        self._next = 0
        self._selector: AutoSplitSelector | StickySelector | None = None

    @property
    def type_name(self) -> str:
        return SubscriptionType.of(self.sub_type, self.broadcast).value

    def add_consumer(self, consumer: Consumer, sub_type: SubTypeValue, broadcast: bool = False) -> None:
        if self.consumers and (broadcast != self.broadcast or (sub_type != self.sub_type and not broadcast)):
            raise ConsumerBusy(f"Subscription {self.name} is of type {self.type_name}")
        self.sub_type, self.broadcast = sub_type, broadcast
        if broadcast:
            self.consumers.append(consumer)
            return
        if sub_type == EXCLUSIVE and self.consumers:
            raise ConsumerBusy("Exclusive consumer is already connected")
        if sub_type == KEY_SHARED:
            self._add_to_selector(consumer)
        self.consumers.append(consumer)

    def _add_to_selector(self, consumer: Consumer) -> None:
        if self._selector is None or not self.consumers:
            self._selector = new_selector(key_shared_mode(consumer.key_shared_meta))
        join_selector(self._selector, consumer, consumer.key_shared_meta)

    def remove_consumer(self, consumer: Consumer) -> None:
        consumer.closed = True
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        if self._selector is not None:
            self._selector.remove(consumer)
        if not self.consumers:
            self.topic.subscriptions.pop(self.name, None)

    remove_consumer_silently = remove_consumer

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits

    def acknowledge(self, ack: wire.CommandAck, consumer: Consumer | None = None) -> None:
        """Nothing is kept, so there is nothing to acknowledge."""

    def acknowledge_one(self, consumer: Consumer, cumulative: bool, ledger_id: int, entry_id: int) -> bool:
        """The usual ACK read without protobuf (``ServerCnx._handle_hot_ack``): not taken here, it
        goes the full way (``acknowledge``), as on a persistent subscription without a broadcast
        dispatcher."""
        return False

    def check_end_of_topic(self) -> None:
        """A non-persistent topic is never terminated."""

    def redeliver(self, consumer: Consumer, msg_ids: list[wire.MessageIdData]) -> None:
        """Nothing is kept, so nothing can be delivered again."""

    def unsubscribe(self, consumer: Consumer) -> None:
        if any(c is not consumer for c in self.consumers):
            raise ConsumerBusy(f"Subscription {self.name} has other connected consumers")
        self.remove_consumer(consumer)

    def reset_cursor(self, position: Position) -> None:
        raise NotAllowed("seek is not supported on non-persistent topics")

    def on_writable(self, consumer: Consumer) -> None:
        """Nothing waits for a consumer to be writable: what it could not take was dropped."""

    def notify_new_entries(self) -> None:
        pass

    def close(self) -> None:
        self.consumers.clear()

    def _target(self, item: DispatchEntry) -> Consumer | None:
        if not self.consumers:
            return None
        if self.sub_type in (EXCLUSIVE, FAILOVER):
            return choose_active(self.consumers, self.topic.partition_index)
        if self.sub_type == KEY_SHARED and self._selector is not None:
            return self._selector.select(sticky_key_hash(sticky_key(item.metadata)))
        n = len(self.consumers)
        for step in range(n):
            candidate = self.consumers[(self._next + step) % n]
            if candidate.permits > 0 and candidate.writable:
                self._next = (self._next + step + 1) % n
                return candidate
        return None

    def deliver(self, item: DispatchEntry) -> None:
        """Send ``item`` to the consumers that can take it now; nothing is kept for the others."""
        if self.broadcast:
            for consumer in self.consumers:
                if consumer.permits > 0 and consumer.writable:
                    consumer.send_entries([item], {})
                else:
                    self.traffic.messages_dropped += item.num_messages
            return
        target = self._target(item)
        if target is None or target.permits <= 0 or not target.writable:
            self.traffic.messages_dropped += item.num_messages
            return
        target.send_entries([item], {})


class NonPersistentTopic:
    persistent = False
    ml = None

    def __init__(self, name: TopicName, config: BrokerConfig) -> None:
        self.name = name
        self.config = config
        self.partition_index = name.partition_index
        self.producers: dict[tuple[int, int], Producer] = {}
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.traffic = Traffic()
        #: Non-persistent topics are not geo-replicated (yet): no cursors, no replicators.
        self.replication_cursors: dict = {}
        self.replicators: dict = {}
        self._ids = itertools.count()

    topic_epoch = 0
    terminated = False  # termination is for persistent topics

    def add_producer(self, producer: Producer) -> bool:
        if any(p.name == producer.name for p in self.producers.values()):
            raise BrokerError(f"Producer with name '{producer.name}' is already connected", wire.ProducerBusy)
        if producer.access_mode != wire.Shared:
            raise NotAllowed("exclusive producer access is not supported on non-persistent topics")
        self.producers[(id(producer.cnx), producer.producer_id)] = producer
        return True

    def remove_producer(self, producer: Producer) -> None:
        self.producers.pop((id(producer.cnx), producer.producer_id), None)

    def last_sequence_id(self, producer_name: str) -> int:
        return -1

    def publish(
        self,
        producer: Producer,
        send: wire.CommandSend,
        headers_and_payload: memoryview,
        callback,
        metadata: wire.MessageMetadata | None = None,
    ) -> None:
        position = Position(0, next(self._ids))
        item = DispatchEntry.of(Entry(position, bytes(headers_and_payload)))
        for subscription in list(self.subscriptions.values()):
            subscription.deliver(item)
        callback(position, None)

    def subscribe(
        self, consumer_factory: Callable[[NonPersistentSubscription], Consumer], cmd: wire.CommandSubscribe
    ) -> Consumer:
        subscription = self.subscriptions.get(cmd.subscription)
        if subscription is None:
            subscription = NonPersistentSubscription(self, cmd.subscription, cmd.sub_type)
        consumer = consumer_factory(subscription)
        subscription.add_consumer(consumer, cmd.sub_type, broadcast=wants_broadcast(cmd))
        self.subscriptions[cmd.subscription] = subscription
        return consumer

    def flush(self) -> None:
        pass

    #: Nothing stored, nothing under way: unloading it is only ``detach``.
    busy = False

    def close(self) -> None:
        self.detach()

    def detach(self) -> None:
        for subscription in self.subscriptions.values():
            subscription.close()

    def close_storage(self) -> None:
        pass
