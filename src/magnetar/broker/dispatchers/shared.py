"""Shared: entries spread round robin over consumers with permits; unacked ones are replayed."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import TYPE_CHECKING

from magnetar.broker.dispatchers.base import Dispatcher
from magnetar.broker.entries import DispatchEntry
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.subscription import Subscription


class ReplayQueue:
    """Positions to send again, kept sorted so replays go out in publish order."""

    def __init__(self) -> None:
        self._sorted: list[Position] = []
        self._members: set[Position] = set()

    def __len__(self) -> int:
        return len(self._sorted)

    def add(self, position: Position) -> None:
        if position not in self._members:
            self._members.add(position)
            bisect.insort(self._sorted, position)

    def discard(self, position: Position) -> None:
        if position in self._members:
            self._members.remove(position)
            del self._sorted[bisect.bisect_left(self._sorted, position)]

    def pop_first(self, n: int) -> list[Position]:
        taken, self._sorted = self._sorted[:n], self._sorted[n:]
        self._members.difference_update(taken)
        return taken

    def clear(self) -> None:
        self._sorted.clear()
        self._members.clear()


class SharedDispatcher(Dispatcher):
    def __init__(self, subscription: Subscription, max_read_batch: int = 100) -> None:
        super().__init__(subscription, max_read_batch)
        self.replay = ReplayQueue()
        #: Which consumer holds each delivered, unacknowledged entry.
        self.owner: dict[Position, Consumer] = {}
        self._next = 0

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        for position in consumer.pending_acks:
            if self.owner.get(position) is consumer:
                del self.owner[position]
                self.replay.add(position)
        consumer.pending_acks.clear()
        self.schedule()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        wanted = list(consumer.pending_acks) if positions is None else positions
        moved = []
        for position in wanted:
            if consumer.pending_acks.pop(position, None) is not None:
                self.owner.pop(position, None)
                self.replay.add(position)
                moved.append(position)
        self.bump_redelivery(moved)
        self.schedule()

    def on_acknowledged(self, positions: Iterable[Position]) -> None:
        positions = list(positions)
        super().on_acknowledged(positions)
        for position in positions:
            holder = self.owner.pop(position, None)
            if holder is not None:
                holder.pending_acks.pop(position, None)
            self.replay.discard(position)

    def on_mark_delete(self, position: Position) -> None:
        super().on_mark_delete(position)
        self.on_acknowledged([p for p in self.owner if p <= position])

    def on_cursor_reset(self) -> None:
        super().on_cursor_reset()
        self.replay.clear()
        self.owner.clear()

    def _ready_consumers(self) -> list[Consumer]:
        return [c for c in self.consumers if c.permits > 0 and c.writable]

    def _read(self, max_messages: int) -> list[DispatchEntry]:
        if self.replay:
            ml, cursor = self.subscription.topic.ml, self.cursor
            entries = []
            for position in self.replay.pop_first(min(max_messages, self.max_read_batch)):
                if not cursor.is_acked(position):
                    entries.append(DispatchEntry.of(ml.read_entry(position)))
            if entries:
                return entries
        return self.read_from_cursor(max_messages)

    def dispatch_round(self) -> bool:
        ready = self._ready_consumers()
        if not ready:
            return False
        entries = self._read(sum(c.permits for c in ready))
        if not entries:
            return bool(self.replay)
        batches: dict[int, list[DispatchEntry]] = {}
        by_id: dict[int, Consumer] = {}
        leftovers: list[DispatchEntry] = []
        for item in entries:
            consumer = self._next_consumer(ready)
            if consumer is None:
                leftovers.append(item)
                continue
            consumer.permits -= item.num_messages  # reserve now; send_entries charges again below
            batches.setdefault(id(consumer), []).append(item)
            by_id[id(consumer)] = consumer
        for key, items in batches.items():
            consumer = by_id[key]
            consumer.permits += sum(i.num_messages for i in items)
            for item in items:
                consumer.pending_acks[item.position] = item.num_messages
                self.owner[item.position] = consumer
            consumer.send_entries(items, self.redelivery_counts)
        for item in leftovers:
            self.replay.add(item.position)
        return True

    def _next_consumer(self, ready: list[Consumer]) -> Consumer | None:
        """Round robin over the consumers that still have permits."""
        n = len(ready)
        for step in range(n):
            consumer = ready[(self._next + step) % n]
            if consumer.permits > 0:
                self._next = (self._next + step + 1) % n
                return consumer
        return None
