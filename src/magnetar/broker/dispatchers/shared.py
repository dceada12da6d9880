"""Shared: entries spread round robin over consumers with permits; unacked ones are replayed.

Chunked messages (PIP 37, which Pulsar leaves to Exclusive and Failover): every chunk of a
message goes to the consumer its first chunk went to (``routes.ChunkOwners``). While that
consumer has no permits its chunks wait in the replay queue, passed over without being read,
and everything else goes on to the other consumers. A redelivery of any chunk (nack, ack
timeout) gives back every chunk of the message the consumer holds, so that one consumer
gets them all again, in order, starting with the first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from magnetar.broker.dispatchers.base import Dispatcher
from magnetar.broker.dispatchers.delayed import DelayedDeliveryTracker
from magnetar.broker.dispatchers.replay_queue import ReplayQueue
from magnetar.broker.dispatchers.routes import NO_ROUTE, ChunkOwners, Route
from magnetar.broker.entries import DispatchEntry
from magnetar.protocol.chunks import chunk_ref
from magnetar.storage.errors import EntryNotFoundError, OffloadedReadError, OffloadedReadPending
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.topic_api import CursorSubscription


#: Stop reading new entries while this many wait in the replay queue (for a chunk's consumer,
#: a key's consumer, or any consumer with permits).
MAX_HELD_BACK = 10_000

Assignment = list[tuple["Consumer", list[tuple[DispatchEntry, Route]]]]


class SharedDispatcher(Dispatcher):
    """Round robin over consumers with permits. Entries due later (``deliver_at_time``) wait in
    the delayed-delivery tracker; redelivered and held-back entries wait in the replay queue,
    which is served first, in publish order."""

    def __init__(self, subscription: CursorSubscription[Consumer], max_read_batch: int = 100) -> None:
        super().__init__(subscription, max_read_batch)
        self.consumers: list[Consumer] = []
        self.replay = ReplayQueue()
        self.delayed = DelayedDeliveryTracker()
        #: Which consumer holds each delivered, unacknowledged entry.
        self.owner: dict[Position, Consumer] = {}
        #: The route of each delivered, unacknowledged entry that has one (a chunk; Key_Shared: all).
        self.routes: dict[Position, Route] = {}
        #: The consumer receiving each chunked message now.
        self.chunks: ChunkOwners[Consumer] = ChunkOwners()
        self._next = 0
        self._timer: asyncio.TimerHandle | None = None

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.chunks.release_consumer(consumer)
        for position in list(consumer.pending_acks):
            if self.owner.get(position) is consumer:
                self._give_back(position)
        consumer.pending_acks.clear()
        self.schedule()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if positions is None:
            wanted = list(consumer.pending_acks)
            self.chunks.release_consumer(consumer)
            consumer.forget_queued()
        else:
            wanted = self._whole_messages(consumer, positions)
        moved = [p for p in wanted if p in consumer.pending_acks and self.owner.get(p) is consumer]
        for position in moved:
            self._give_back(position)
        self.bump_redelivery(moved)
        self.schedule()

    def _whole_messages(self, consumer: Consumer, positions: list[Position]) -> list[Position]:
        """``positions`` and every other chunk ``consumer`` holds of the chunked messages among them
        (a client asks for the one id it knows a message by: the official ones name the last
        chunk). Their messages are released: the first chunk picks a consumer again."""
        routes = self.routes
        uuids = set()
        for position in positions:
            route = routes.get(position)
            if route is not None and route.chunk is not None and self.owner.get(position) is consumer:
                uuids.add(route.chunk.uuid)
        if not uuids:
            return positions
        for uuid in uuids:
            if self.chunks.owner(uuid) is consumer:
                self.chunks.release(uuid)
        chunks = [
            p
            for p in consumer.pending_acks
            if (route := routes.get(p)) is not None and route.chunk is not None and route.chunk.uuid in uuids
        ]
        return sorted({*positions, *chunks})

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

    def on_cursor_reset(self, disconnected: Collection[str] = ()) -> None:
        for position in list(self.owner):
            self._forget_delivery(position)
        super().on_cursor_reset(disconnected)
        self.replay.clear()
        self.delayed.clear()
        self.chunks.clear()

    def close(self) -> None:
        super().close()
        if self._timer is not None:
            self._timer.cancel()

    # -- delivery bookkeeping (Key_Shared extends these) ----------------------------------
    def _record_delivery(self, consumer: Consumer, item: DispatchEntry, route: Route) -> None:
        consumer.pending_acks[item.position] = item.num_messages
        self.owner[item.position] = consumer
        if route.tags:
            self.routes[item.position] = route

    def _forget_delivery(self, position: Position) -> None:
        holder = self.owner.pop(position, None)
        if holder is not None:
            holder.pending_acks.pop(position, None)
        self.routes.pop(position, None)

    def _give_back(self, position: Position) -> None:
        """A delivered entry goes back to the replay queue, with its route."""
        route = self.routes.get(position)
        self._forget_delivery(position)
        self.replay.add(position, route)

    # -- routing (Key_Shared overrides these) ---------------------------------------------
    def _route(self, item: DispatchEntry) -> Route:
        chunk = chunk_ref(item.metadata)
        return NO_ROUTE if chunk is None else Route(chunk)

    def _blocked(self, route: Route, budget: dict[int, int]) -> bool:
        """True when an entry of this route cannot go to anyone now (decided before reading it)."""
        owner = self.chunks.owner(route.chunk.uuid) if route.chunk is not None else None
        return owner is not None and budget.get(id(owner), 0) <= 0

    def _behind(self, route: Route, held: set[str | int]) -> bool:
        """True when an entry of this route must wait behind one held back before it: one of its
        chunked message, or (unless the entry continues a message already being sent, which
        comes before anything of its key held back since) one of its key."""
        if not held:
            return False
        if route.chunk is not None and self.chunks.owner(route.chunk.uuid) is not None:
            return route.chunk.uuid in held
        return not held.isdisjoint(route.tags)

    def _target(self, route: Route, ready: list[Consumer], budget: dict[int, int]) -> Consumer | None:
        """Who gets an entry of this route now: a chunk's owner, else the subscription type's pick."""
        if route.chunk is not None:
            owner = self.chunks.owner(route.chunk.uuid)
            if owner is not None:
                return owner if budget.get(id(owner), 0) > 0 else None
        return self._pick(route, ready, budget)

    def _pick(self, route: Route, ready: list[Consumer], budget: dict[int, int]) -> Consumer | None:
        """Round robin: the next consumer that still has permits."""
        n = len(ready)
        for step in range(n):
            consumer = ready[(self._next + step) % n]
            if budget[id(consumer)] > 0:
                self._next = (self._next + step + 1) % n
                return consumer
        return None

    # -- reading --------------------------------------------------------------------------
    def _ready_consumers(self) -> list[Consumer]:
        return [c for c in self.consumers if c.permits > 0 and c.writable]

    def _read(self, budget: dict[int, int]) -> tuple[list[DispatchEntry], set[str | int]]:
        """Entries for one round: replays first (passing over those that must wait), then new
        ones once every replay was looked at. Also returns the tags of the replays that wait:
        later entries with one of them must wait too."""
        batch = max(1, min(sum(budget.values()), self.max_read_batch))
        entries: list[DispatchEntry] = []
        held: set[str | int] = set()
        looked_at_all = True
        if self.replay:
            routes: dict[Position, Route] = {}
            positions, held, looked_at_all = self.replay.take(
                batch, lambda route, held: self._behind(route, held) or self._blocked(route, budget), routes
            )
            entries = self._read_positions(positions, routes)
            if len(entries) < len(positions) and self.replay:
                looked_at_all = False  # some went back (offloaded, being fetched): they go first
        if looked_at_all and len(entries) < batch and len(self.replay) < MAX_HELD_BACK:
            entries += self.read_from_cursor(batch - len(entries))
        return entries, held

    def _read_positions(
        self, positions: list[Position], routes: dict[Position, Route]
    ) -> list[DispatchEntry]:
        """The entries to send again, read without waiting: from the first one offloaded and being
        fetched (or whose store fails), the positions go back to the replay queue with their
        routes, and what was read before goes out; with nothing read, the error ends the round
        (the topic wakes its dispatchers once the bytes are there: docs/tiered-storage.md).
        An entry trimmed by retention since it was sent (a non-durable subscription holds none)
        is gone: passed over, as Pulsar does, and the rest goes out."""
        ml, cursor, recent = self.subscription.topic.ml, self.cursor, self.subscription.topic.recent_entries
        out: list[DispatchEntry] = []
        for n, position in enumerate(positions):
            if cursor.is_acked(position):
                continue
            try:
                out.append(recent.entry(ml.read_entry(position, wait=False)))
            except EntryNotFoundError:
                self.redelivery_counts.pop(position, None)  # trimmed since: never sent again
            except (OffloadedReadPending, OffloadedReadError):
                for later in positions[n:]:
                    self.replay.add(later, routes.get(later))
                if out:
                    return out
                raise
        return out

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
        budget = {id(c): c.permits for c in ready}
        from_cursor = self.cursor.read_position
        read, held = self._read(budget)
        if not read:
            return False
        entries = self._hold_delayed(read)
        assigned, leftovers = self._assign(entries, ready, budget, held)
        for consumer, items in assigned:
            for item, route in items:
                self._record_delivery(consumer, item, route)
            consumer.send_entries([item for item, _ in items], self.redelivery_counts)
            self.sent_to(consumer)
        for item, route in leftovers:
            self.replay.add(item.position, route)
        # Progress: something went out, or the cursor moved on (what waits is in the replay
        # queue now, passed over by later rounds). Another round only if there is more to read
        # (new entries schedule one when stored).
        progress = bool(assigned) or len(leftovers) < len(read) or self.cursor.read_position != from_cursor
        return progress and (bool(self.replay) or self.cursor.has_more_entries())

    def _assign(
        self,
        entries: list[DispatchEntry],
        ready: list[Consumer],
        budget: dict[int, int],
        held: set[str | int],
    ) -> tuple[Assignment, list[tuple[DispatchEntry, Route]]]:
        """Each entry to its target (``_target``) while that has permits. An entry that cannot go
        holds back the later ones it must not be overtaken by (``_behind``)."""
        batches: dict[int, tuple[Consumer, list[tuple[DispatchEntry, Route]]]] = {}
        leftovers: list[tuple[DispatchEntry, Route]] = []
        for item in entries:
            route = self._route(item)
            target = None if self._behind(route, held) else self._target(route, ready, budget)
            if target is None:
                held.update(route.tags)
                leftovers.append((item, route))
                continue
            if route.chunk is not None:
                self.chunks.sent(route.chunk, target)
            budget[id(target)] -= item.num_messages
            batches.setdefault(id(target), (target, []))[1].append((item, route))
        return list(batches.values()), leftovers
