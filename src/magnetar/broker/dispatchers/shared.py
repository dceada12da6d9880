"""Shared: entries spread round robin over consumers with permits; unacked ones are replayed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from magnetar.broker.dispatchers.base import Dispatcher
from magnetar.broker.dispatchers.delayed import DelayedDeliveryTracker
from magnetar.broker.dispatchers.replay_queue import ReplayQueue
from magnetar.broker.entries import DispatchEntry
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.subscription import Subscription


def chunk_info(item: DispatchEntry) -> tuple[str, int, int] | None:
    """(uuid, chunk id, number of chunks) of a chunk of a large message, else None."""
    meta = item.metadata
    if meta is None or not meta.HasField("chunk_id") or meta.num_chunks_from_msg <= 1:
        return None
    return meta.uuid, meta.chunk_id, meta.num_chunks_from_msg


class SharedDispatcher(Dispatcher):
    """Round robin over consumers with permits. Entries due later (``deliver_at_time``) wait in
    the delayed-delivery tracker; redelivered and orphaned entries wait in the replay queue,
    which is served first, in publish order."""

    def __init__(self, subscription: Subscription, max_read_batch: int = 100) -> None:
        super().__init__(subscription, max_read_batch)
        self.replay = ReplayQueue()
        self.delayed = DelayedDeliveryTracker()
        #: Which consumer holds each delivered, unacknowledged entry.
        self.owner: dict[Position, Consumer] = {}
        self._next = 0
        self._timer: asyncio.TimerHandle | None = None
        #: Consumer receiving each chunked message now (by uuid), until its last chunk goes out.
        self._chunk_owners: dict[str, Consumer] = {}

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        for uuid in [u for u, owner in self._chunk_owners.items() if owner is consumer]:
            del self._chunk_owners[uuid]
        for position in list(consumer.pending_acks):
            if self.owner.get(position) is consumer:
                self._forget_delivery(position)
                self.replay.add(position)
        consumer.pending_acks.clear()
        self.schedule()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        wanted = list(consumer.pending_acks) if positions is None else positions
        moved = []
        for position in wanted:
            if position in consumer.pending_acks and self.owner.get(position) is consumer:
                self._forget_delivery(position)
                self.replay.add(position)
                moved.append(position)
        self.bump_redelivery(moved)
        self.schedule()

    def on_acknowledged(self, positions: Iterable[Position]) -> None:
        positions = list(positions)
        super().on_acknowledged(positions)
        for position in positions:
            if position in self.owner:
                self._forget_delivery(position)
            self.replay.discard(position)
            self.delayed.discard(position)

    def on_mark_delete(self, position: Position) -> None:
        super().on_mark_delete(position)
        self.on_acknowledged([p for p in self.owner if p <= position])

    def on_cursor_reset(self) -> None:
        for position in list(self.owner):
            self._forget_delivery(position)
        super().on_cursor_reset()
        self.replay.clear()
        self.delayed.clear()
        self._chunk_owners.clear()

    def close(self) -> None:
        super().close()
        if self._timer is not None:
            self._timer.cancel()

    # -- delivery bookkeeping (Key_Shared extends these) ----------------------------------
    def _record_delivery(self, consumer: Consumer, item: DispatchEntry) -> None:
        consumer.pending_acks[item.position] = item.num_messages
        self.owner[item.position] = consumer

    def _forget_delivery(self, position: Position) -> None:
        holder = self.owner.pop(position, None)
        if holder is not None:
            holder.pending_acks.pop(position, None)

    # -- reading --------------------------------------------------------------------------
    def _ready_consumers(self) -> list[Consumer]:
        return [c for c in self.consumers if c.permits > 0 and c.writable]

    def _read_replay(self, max_messages: int) -> list[DispatchEntry]:
        ml, cursor = self.subscription.topic.ml, self.cursor
        entries = []
        for position in self.replay.pop_first(min(max_messages, self.max_read_batch)):
            if not cursor.is_acked(position):
                entries.append(self.subscription.topic.recent_entries.entry(ml.read_entry(position)))
        return entries

    def _read(self, max_messages: int) -> list[DispatchEntry]:
        if self.replay:
            entries = self._read_replay(max_messages)
            if entries:
                return entries
        return self.read_from_cursor(max_messages)

    def _hold_delayed(self, entries: list[DispatchEntry]) -> list[DispatchEntry]:
        """Park entries whose delivery time has not come; the rest go out now."""
        now = int(time.time() * 1000)
        out = []
        for item in entries:
            meta = item.metadata
            if meta is not None and meta.HasField("deliver_at_time") and meta.deliver_at_time > now:
                self.delayed.add(item.position, meta.deliver_at_time)
            else:
                out.append(item)
        if len(self.delayed):
            self._arm_timer()
        return out

    def _arm_timer(self) -> None:
        due = self.delayed.next_time()
        if due is None or self._closed:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, due / 1000 - time.time())
        self._timer = loop.call_at(loop.time() + delay, self._release_due)

    def _release_due(self) -> None:
        self._timer = None
        for position in self.delayed.pop_due(int(time.time() * 1000)):
            self.replay.add(position)
        self._arm_timer()
        self.schedule()

    # -- dispatch -------------------------------------------------------------------------
    def dispatch_round(self) -> bool:
        ready = self._ready_consumers()
        if not ready:
            return False
        read = self._read(sum(c.permits for c in ready))
        if not read:
            return False
        entries = self._hold_delayed(read)
        batches, leftovers = self._assign(entries, ready)
        for consumer, items in batches:
            for item in items:
                self._record_delivery(consumer, item)
            consumer.send_entries(items, self.redelivery_counts)
        for item in leftovers:
            self.replay.add(item.position)
        # Progress was made if anything went out or the cursor moved on; another round only
        # if there is more to read (new entries schedule one when stored).
        progress = bool(batches) or len(leftovers) < len(read)
        return progress and (bool(self.replay) or self.cursor.has_more_entries())

    def _assign(
        self, entries: list[DispatchEntry], ready: list[Consumer]
    ) -> tuple[list[tuple[Consumer, list[DispatchEntry]]], list[DispatchEntry]]:
        """Round robin: each entry to the next consumer that still has permits — except the
        chunks of a large message, which all go to the consumer that got its first chunk
        (so every subscription type can carry chunked messages)."""
        budget = {id(c): c.permits for c in ready}
        batches: dict[int, tuple[Consumer, list[DispatchEntry]]] = {}
        leftovers = []
        held: set[str] = set()  # messages whose chunks wait: later chunks must not overtake
        for item in entries:
            chunk = chunk_info(item)
            if chunk is None:
                consumer = self._next_consumer(ready, budget)
            elif chunk[0] in held:
                consumer = None
            else:
                consumer = self._chunk_consumer(chunk, ready, budget)
                if consumer is None:
                    held.add(chunk[0])
            if consumer is None:
                leftovers.append(item)
                continue
            budget[id(consumer)] -= item.num_messages
            batches.setdefault(id(consumer), (consumer, []))[1].append(item)
        return list(batches.values()), leftovers

    def _chunk_consumer(
        self, chunk: tuple[str, int, int], ready: list[Consumer], budget: dict[int, int]
    ) -> Consumer | None:
        uuid, chunk_id, total = chunk
        owner = self._chunk_owners.get(uuid)
        if owner is None or chunk_id == 0:
            owner = self._next_consumer(ready, budget)
            if owner is None:
                return None
            self._chunk_owners[uuid] = owner
        elif budget.get(id(owner), 0) <= 0:
            return None  # the owner has no permits (or is not writable) now: wait for it
        if chunk_id >= total - 1:
            del self._chunk_owners[uuid]
        return owner

    def _next_consumer(self, ready: list[Consumer], budget: dict[int, int]) -> Consumer | None:
        n = len(ready)
        for step in range(n):
            consumer = ready[(self._next + step) % n]
            if budget[id(consumer)] > 0:
                self._next = (self._next + step + 1) % n
                return consumer
        return None
