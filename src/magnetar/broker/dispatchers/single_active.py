"""Exclusive and Failover: one active consumer receives everything, in order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.dispatchers.base import MAX_READ_BYTES, Dispatcher
from magnetar.broker.dispatchers.compacted_reads import compacted_ack_sets, read_compacted
from magnetar.broker.entries import DispatchEntry
from magnetar.broker.errors import ConsumerBusy
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.topic_api import CursorSubscription

#: At most this many positions get their redelivery count raised by one rewind.
_MAX_COUNTED_ON_REWIND = 100_000


def choose_active(consumers: list[Consumer], partition_index: int) -> Consumer | None:
    """Pulsar's choice: on a non-partitioned topic the first consumer that connected; on a
    partition, consumers sorted by priority then name, partitions spread over those of the
    highest priority."""
    if not consumers:
        return None
    if partition_index < 0:
        return consumers[0]
    ordered = sorted(consumers, key=lambda c: (c.priority_level, c.name))
    top = ordered[0].priority_level
    highest = sum(1 for c in ordered if c.priority_level == top)
    return ordered[partition_index % highest]


class SingleActiveConsumerDispatcher(Dispatcher):
    def __init__(
        self, subscription: CursorSubscription[Consumer], failover: bool, max_read_batch: int = 100
    ) -> None:
        super().__init__(subscription, max_read_batch)
        self.consumers: list[Consumer] = []
        self.failover = failover
        self.active: Consumer | None = None

    def add_consumer(self, consumer: Consumer) -> None:
        if not self.failover and self.consumers:
            raise ConsumerBusy("Exclusive consumer is already connected")
        self.consumers.append(consumer)
        self._pick_active(newcomer=consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self._pick_active()

    def _pick_active(self, newcomer: Consumer | None = None) -> None:
        chosen = choose_active(self.consumers, self.subscription.topic.partition_index)
        if chosen is self.active:
            if self.failover and newcomer is not None and newcomer is not chosen:
                newcomer.notify_active_consumer_change(False)
            return
        previous, self.active = self.active, chosen
        if previous is not None:
            # The new active consumer must get everything the previous one left unacknowledged.
            previous.forget_queued()
            self.cursor.rewind()
        if self.failover:
            for consumer in self.consumers:
                consumer.notify_active_consumer_change(consumer is chosen)
        self.schedule()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        # Single-active dispatch cannot replay single messages out of order: rewind to the
        # first unacknowledged entry, as Pulsar does, and count every delivered one.
        if consumer is not self.active:
            return
        self.bump_redelivery(self._delivered_unacked())
        consumer.forget_queued()
        self.cursor.rewind()
        self.schedule()

    def _read_compacted(self, consumer: Consumer) -> list[DispatchEntry] | None:
        """The next entries of the topic's compacted view (``compacted_reads.py``), or None."""
        topic = self.subscription.topic
        count = max(1, min(consumer.permits, self.max_read_batch))
        read = read_compacted(self.cursor, topic.ml, topic.compaction, count, MAX_READ_BYTES)
        return None if read is None else [DispatchEntry.of(entry) for entry in read]

    def _delivered_unacked(self) -> list[Position]:
        cursor, ml = self.cursor, self.subscription.topic.ml
        out: list[Position] = []
        position = ml.next_position(cursor.mark_delete_position)
        end = cursor.read_position
        while position < end and len(out) < _MAX_COUNTED_ON_REWIND:
            if position > ml.last_confirmed:
                break
            if not cursor.is_acked(position):
                out.append(position)
            position = ml.next_position(position)
        return out

    def dispatch_round(self) -> bool:
        consumer = self.active
        if consumer is None or consumer.permits <= 0 or not consumer.writable:
            return False
        compacted = self._read_compacted(consumer) if consumer.read_compacted else None
        if compacted is not None:
            consumer.send_entries(
                compacted, self.redelivery_counts, compacted_ack_sets(self.cursor, compacted)
            )
            self.sent_to(consumer)
            return True  # the view may hold more, whatever the ledger's own positions say
        entries = self.read_from_cursor(consumer.permits)
        if not entries:
            return False
        consumer.send_entries(entries, self.redelivery_counts)
        self.sent_to(consumer)
        # At the tail, a round now would read nothing: new entries schedule one when stored.
        return self.cursor.has_more_entries()
