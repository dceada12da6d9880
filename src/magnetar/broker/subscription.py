"""A subscription: a named cursor on a topic plus the dispatcher that feeds its consumers."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatchers import Dispatcher, create_dispatcher
from magnetar.broker.errors import ConsumerBusy, NotAllowed, ServiceNotReady
from magnetar.broker.ids import position_of
from magnetar.broker.subscription_type import SubscriptionType, SubTypeValue
from magnetar.broker.traffic import Traffic
from magnetar.protocol import wire
from magnetar.protocol.message_id import to_signed
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.owner_ref import OwnerRef
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.topic_api import LedgerTopic


class PersistentSubscription:
    def __init__(self, topic: LedgerTopic, name: str, cursor: ManagedCursor, durable: bool) -> None:
        #: Held weakly: the topic owns its subscriptions (storage/owner_ref.py).
        self._topic = OwnerRef(topic, "topic", topic.name, ServiceNotReady)
        #: Told this subscription before a seek resets it (a spread topic's owner tells the
        #: followers: spread.py).
        self.before_reset: Callable[[PersistentSubscription], None] | None = None
        #: Given the other consumers connected when one asks to UNSUBSCRIBE, closes the followers'
        #: links among them that serve no connected consumer and returns those that still hold
        #: the subscription (a spread topic's owner: spread.py).
        self.release_links: Callable[[PersistentSubscription, list[Consumer]], list[Consumer]] | None = None
        #: The resets of this subscription known here (``CursorSubscription.reset_epoch``): set by
        #: the spread (spread.py) before its broadcast dispatcher is made, and at each reset.
        self.reset_epoch = 0
        self.name = name
        self.cursor = cursor
        self.durable = durable
        #: The dispatcher's type: the one its consumers declared, or Broadcast when they asked
        #: for one (they may then declare any type).
        self.kind: SubscriptionType | None = None
        self.dispatcher: Dispatcher | None = None
        #: Messages and bytes dispatched to this subscription's consumers, past ones included.
        self.traffic = Traffic()

    @property
    def topic(self) -> LedgerTopic:
        return self._topic()

    @property
    def consumers(self) -> Collection[Consumer]:
        return self.dispatcher.consumers if self.dispatcher else []

    @property
    def type_name(self) -> str | None:
        return None if self.kind is None else self.kind.value

    def add_consumer(self, consumer: Consumer, sub_type: SubTypeValue, broadcast: bool = False) -> None:
        """Attach a consumer; the first one picks the dispatcher (a broadcast one if it asked, in
        which case consumers of any declared type share it)."""
        kind = SubscriptionType.of(sub_type, broadcast)
        if self.dispatcher is not None and self.kind is not kind:
            if self.dispatcher.consumers:
                raise ConsumerBusy(f"Subscription {self.name} is of type {self.type_name}, not {kind.value}")
            self.dispatcher.drop_state()
            self.dispatcher.close()
            self.dispatcher = None
        if self.dispatcher is None:
            try:
                self.dispatcher = create_dispatcher(
                    kind, self, max_read_batch=self.topic.config.dispatcher_max_read_batch
                )
            except LookupError as exc:
                raise NotAllowed(str(exc)) from None
            self.kind = kind
        self.dispatcher.add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        consumer.closed = True
        consumer.leave_chunk_watch(keep=True)
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
        if not self.durable and not self.consumers:
            self.topic.remove_subscription(self.name)

    def flow(self, consumer: Consumer, permits: int) -> None:
        if self.dispatcher is not None:
            self.dispatcher.consumer_flow(consumer, permits)

    def on_writable(self, consumer: Consumer) -> None:
        if self.dispatcher is not None:
            self.dispatcher.on_writable(consumer)

    def notify_new_entries(self) -> None:
        if self.dispatcher is not None and self.dispatcher.consumers:
            self.dispatcher.on_new_entries()

    # -- acknowledgements ------------------------------------------------------------------
    def acknowledge_one(self, consumer: Consumer, cumulative: bool, ledger_id: int, entry_id: int) -> bool:
        """An ACK of one message id (no batch bits), read without protobuf; False when this
        subscription's dispatcher takes ACKs only as commands (then ``acknowledge`` it)."""
        dispatcher = self.dispatcher
        if dispatcher is None or not dispatcher.acknowledge_one(
            consumer, cumulative, Position(to_signed(ledger_id), to_signed(entry_id))
        ):
            return False
        if self.topic.terminated:
            self.check_end_of_topic()
        return True

    def acknowledge(self, ack: wire.CommandAck, consumer: Consumer | None = None) -> None:
        if self.dispatcher is not None and self.dispatcher.acknowledge(consumer, ack):
            if self.topic.terminated:
                self.check_end_of_topic()
            return
        if ack.ack_type == wire.CommandAck.Cumulative:
            if self.kind is not None and self.kind.shared:
                raise NotAllowed("cumulative acknowledgement is not allowed on a shared subscription")
            if ack.message_id:
                self._ack_cumulative(ack.message_id[0])
            return
        last = self.topic.ml.last_confirmed
        done: list[Position] = []
        for msg_id in ack.message_id:
            position = position_of(msg_id)
            if position > last or position.entry_id < 0:
                continue
            if len(msg_id.ack_set):
                size = msg_id.batch_size if msg_id.HasField("batch_size") else 64 * len(msg_id.ack_set)
                if not self.cursor.ack_batch_indexes(position, list(msg_id.ack_set), size):
                    continue
            done.append(position)
        if done:
            self.cursor.delete(done)
            if self.dispatcher is not None:
                self.dispatcher.on_acknowledged(done)
            if self.topic.terminated:
                self.check_end_of_topic()

    def _ack_cumulative(self, msg_id: wire.MessageIdData) -> None:
        position = position_of(msg_id)
        if position > self.topic.ml.last_confirmed or position.entry_id < 0:
            return
        if len(msg_id.ack_set):
            # Up to the entry before, and part of this batch.
            size = msg_id.batch_size if msg_id.HasField("batch_size") else 64 * len(msg_id.ack_set)
            if position.entry_id > 0:
                self.mark_delete(Position(position.ledger_id, position.entry_id - 1))
            if self.cursor.ack_batch_indexes(position, list(msg_id.ack_set), size):
                self.mark_delete(position)
            return
        self.mark_delete(position)

    def expire_before(self, position: Position) -> bool:
        """Message TTL: acknowledge every entry before ``position``; True if anything expired."""
        last_expired = self.topic.ml.previous_position(position)
        if last_expired.entry_id < 0 or last_expired <= self.cursor.mark_delete_position:
            return False
        self.mark_delete(last_expired)
        return True

    def clear_backlog(self) -> None:
        """Acknowledge everything stored so far (Pulsar's skip_all, ``clear-backlog``)."""
        self.mark_delete(self.topic.ml.last_confirmed)

    def skip(self, count: int) -> None:
        """Acknowledge the next ``count`` unacknowledged entries, as Pulsar's skip does (it counts
        entries: a batch is one)."""
        ml, cursor = self.topic.ml, self.cursor
        last = ml.last_confirmed
        position = cursor.mark_delete_position
        while count > 0 and position < last:
            position = ml.next_position(position)
            if not cursor.is_acked(position):
                count -= 1
        self.mark_delete(min(position, last))

    def nth_position(self, n: int) -> Position | None:
        """The ``n``-th entry (from 1) after the mark-delete position, acknowledged or not, as
        Pulsar's peek counts; None past the last one."""
        ml = self.topic.ml
        last = ml.last_confirmed
        position = self.cursor.mark_delete_position
        for _ in range(n):
            position = ml.next_position(position)
            if position > last:
                return None
        return position

    def mark_delete(self, position: Position) -> None:
        if position <= self.cursor.mark_delete_position:
            return
        self.cursor.mark_delete(position)
        if self.dispatcher is not None:
            self.dispatcher.on_mark_delete(position)
        if self.topic.terminated:
            self.check_end_of_topic()

    def check_end_of_topic(self) -> None:
        """On a terminated topic, tell consumers once nothing is left to acknowledge (Pulsar's
        REACHED_END_OF_TOPIC): they will receive nothing more."""
        if self.topic.terminated and self.dispatcher is not None:
            for consumer in self.dispatcher.consumers_at_end():
                consumer.reached_end_of_topic()

    def redeliver(self, consumer: Consumer, msg_ids: list[wire.MessageIdData]) -> None:
        if self.dispatcher is None:
            return
        positions = [position_of(m) for m in msg_ids] if msg_ids else None
        self.dispatcher.redeliver(consumer, positions)

    # -- seek -----------------------------------------------------------------------------
    def reset_cursor(self, position: Position, exactly: bool = False) -> None:
        """Move the subscription to ``position`` (first entry to deliver next); ``exactly``: read
        from there as it is, even in a ledger trimmed since (a seek into the compacted view,
        Pulsar's forced reset).

        As in Pulsar, every consumer is disconnected first; they subscribe again and
        receive from the new position.
        """
        if self.before_reset is not None:
            self.before_reset(self)
        disconnected = self.disconnect_all()
        if exactly:
            self.cursor.reset_exactly(position)
        else:
            self.cursor.reset(position)
        if self.dispatcher is not None:
            self.dispatcher.on_cursor_reset(disconnected)

    def disconnect_all(self) -> list[str]:
        """Close every consumer from the broker's side; the clients will subscribe again. Returns
        their names."""
        consumers = list(self.consumers)
        for consumer in consumers:
            consumer.close_by_broker()
            consumer.cnx.forget_consumer(consumer.consumer_id)
            self.remove_consumer_silently(consumer)
        return [consumer.name for consumer in consumers]

    def remove_consumer_silently(self, consumer: Consumer) -> None:
        """Detach without deleting a non-durable subscription (it is about to be reused)."""
        consumer.closed = True
        consumer.leave_chunk_watch(keep=True)
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)

    def unsubscribe(self, consumer: Consumer) -> None:
        others = [c for c in self.consumers if c is not consumer]
        if others and self.release_links is not None:
            others = self.release_links(self, others)
        if others:
            raise ConsumerBusy(f"Subscription {self.name} has other connected consumers")
        consumer.leave_chunk_watch(keep=False)
        self.remove_consumer(consumer)
        self.close()
        self.topic.delete_subscription(self.name)

    def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()
