"""Broadcast: every consumer of one subscription receives every message, from one dispatcher.

Pulsar has no subscription type that sends the same messages to many consumers; the usual way,
one Exclusive subscription per consumer, gives 100K consumers 100K cursors, dispatchers and
reads of each entry. Here (after NTT's Broadcast Subscription for 100K vehicles on one topic)
the subscription keeps its one stored cursor and this one dispatcher; each consumer gets a
``VirtualCursor`` held in memory. Consumers reading at the same position are served together:
one read from the entry cache or the files, then the same entries are written to each of them.

- A consumer starts at the subscription's mark-delete position: it receives what the
  subscription still holds (the subscription keeps each message until every connected consumer
  has acknowledged it, or it is skipped, expired or evicted).
- The stored cursor moves to the lowest mark-delete position of the connected consumers
  (``PositionFloor``), so a restart resumes where the slowest consumer was.
- A consumer whose connection is lost leaves its virtual cursor *detached*, kept for
  ``broadcast_reconnect_grace_seconds`` (it goes on holding the subscription's messages:
  ``broadcast_detached``): a consumer of the same name subscribing in that time resumes there,
  and what was in flight to it is sent again first. A consumer closed by its client gives its
  virtual cursor up at once.
- Acks, cumulative and individual, move only their consumer's virtual cursor: a cheap step on
  the connection's read path, never queued behind the sending of entries.
- Each virtual cursor (what its consumer acknowledged) is durable, by consumer name, on the
  subscription's cursor (``broadcast_saved``): an ack only marks it changed, and the changed
  ones are written together, one storage write per flush round (``save_state``, on the cursor
  flush schedule and at shutdown). After a restart the stored ones are kept detached for
  ``broadcast_reconnect_grace_seconds`` from the dispatcher's start: a consumer of the same
  name resumes there; one that does not come back gives its virtual cursor up.
- One dispatch round writes to at most ``fanout_per_round`` consumers, then yields to the event
  loop, so 100K consumers at one position do not hold up acks, sends and other subscriptions.
  Rounds are per subscription: two broadcast subscriptions on a topic do not wait for each other.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from magnetar.broker.coarse_clock import CLOCK
from magnetar.broker.dispatchers import broadcast_acks, broadcast_send
from magnetar.broker.dispatchers.base import Dispatcher
from magnetar.broker.dispatchers.broadcast_detached import DetachedVirtualCursors, Kept
from magnetar.broker.dispatchers.broadcast_reads import SharedReads, after
from magnetar.broker.dispatchers.broadcast_saved import SavedVirtualCursors
from magnetar.broker.dispatchers.broadcast_send import OutgoingEntry
from magnetar.broker.dispatchers.position_floor import PositionFloor
from magnetar.broker.dispatchers.virtual_cursor import VirtualCursor
from magnetar.broker.errors import ServiceNotReady
from magnetar.broker.offload_failures import OFFLOAD_RETRY_S
from magnetar.protocol import wire
from magnetar.protocol.hot_frames import partition_field
from magnetar.storage.errors import EntryNotFoundError, OffloadedReadError, OffloadedReadPending
from magnetar.storage.owner_ref import WeakCall
from magnetar.storage.position import Position
from magnetar.storage.virtual_cursors_elsewhere import VirtualCursorsElsewhere

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.topic_api import CursorSubscription

_CUMULATIVE = wire.CommandAck.Cumulative
#: A consumer in a dispatch round, with its virtual cursor.
Member = tuple["Consumer", VirtualCursor]

#: Most consumers one dispatch round writes to before the event loop runs other work.
FANOUT_PER_ROUND = 1000


class BroadcastDispatcher(Dispatcher):
    def __init__(
        self,
        subscription: CursorSubscription[Consumer],
        max_read_batch: int = 100,
        fanout_per_round: int = FANOUT_PER_ROUND,
    ) -> None:
        super().__init__(subscription, max_read_batch)
        self.ml = subscription.topic.ml
        self.partition_field = partition_field(subscription.topic.partition_index)
        self.fanout_per_round = fanout_per_round
        #: The consumers and their cursors; a dict, so 100K of them come and go in O(1).
        self.consumers: dict[Consumer, VirtualCursor] = {}
        self._floor = PositionFloor()
        #: Consumers to look at in the next round (permits, writes or entries may let them go on).
        self._queue: deque[Consumer] = deque()
        self._queued: set[Consumer] = set()
        #: Consumers with permits that have read everything: woken when entries are stored.
        self._at_tail: dict[Consumer, None] = {}
        #: The last mark-delete position this dispatcher knows the subscription's cursor at.
        self._applied = self.cursor.mark_delete_position
        #: Entries read once for all (kept while some consumer has still to be sent them), and
        #: where consumers read next.
        self._reads = SharedReads(subscription, max_read_batch)
        self._read_floor = PositionFloor()
        self.reconnect_grace = subscription.topic.config.broadcast_reconnect_grace_seconds
        #: Virtual cursors kept for consumers whose connection was lost; their mark-delete
        #: positions stay in ``_floor`` meanwhile.
        self._detached = DetachedVirtualCursors(
            self.reconnect_grace,
            WeakCall(self._given_up, "subscription", subscription.name, ServiceNotReady),
        )
        #: Where virtual cursors are kept durable (not for a non-durable subscription, nor without
        #: a grace period: one is then given up as soon as its connection is lost).
        self._saved: SavedVirtualCursors | None = None
        #: Where other workers kept their consumers' virtual cursors (a consumer may come back on
        #: another worker than before: docs/architecture.md, the spread).
        self._elsewhere: VirtualCursorsElsewhere | None = None
        #: Consumers closed and detached virtual cursors given up by the lag policy (broadcast_lag.py).
        self.lag_disconnects = 0
        #: Consumers that resumed at a virtual cursor another worker kept.
        self.adopted = 0
        if subscription.durable and self.reconnect_grace > 0:
            self._saved = SavedVirtualCursors(self.ml.virtual_cursors(subscription.name))
            self._elsewhere = self.ml.virtual_cursors_elsewhere(subscription.name)
            restored = self._saved.restore(
                self.cursor.mark_delete_position, self.ml.next_position, subscription.reset_epoch
            )
            for name, vc in restored:
                self._floor.add(vc.mark_delete)
                self._detach(name, vc)

    # -- durable virtual cursors -------------------------------------------------------------
    def drop_state(self) -> None:
        """The subscription becomes another kind: its stored virtual cursors are deleted at the next flush."""
        if self._saved is not None:
            self._saved.clear()

    def save_state(self) -> None:
        """Hand the virtual cursors changed since the last call to storage (written at its next flush)."""
        if self._saved is not None:
            self._saved.save(self.subscription.reset_epoch)

    # -- consumers -------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        vc = self._detached.take(consumer.name)
        if vc is None:  # else back within the grace period: its virtual cursor, already in the floor
            vc = self._kept_elsewhere(consumer.name)
            if vc is None:
                start = self.cursor.mark_delete_position
                if consumer.joins_at_tail:  # only what is stored from now on (an MQTT subscriber's)
                    start = max(start, self.ml.last_confirmed)
                vc = VirtualCursor(start, self.ml.next_position(start))
            self._floor.add(vc.mark_delete)
            if vc.mark_delete < self._applied:
                self._advance_subscription()  # a follower's floor went back (follower_topic.py)
        self.consumers[consumer] = vc
        vc.connected_since = CLOCK.now
        if self._saved is not None:
            self._saved.changes[consumer.name] = vc
        self._read_floor.add(vc.read_position)
        self._wake(consumer)

    def _kept_elsewhere(self, name: str) -> VirtualCursor | None:
        """The virtual cursor another worker stored for a consumer of this name (it was served
        there before), moved up to the subscription's mark-delete position; None if none did."""
        if self._elsewhere is None:
            return None
        state = self._elsewhere.find(name, self.subscription.reset_epoch)
        if state is None:
            return None
        next_position = self.ml.next_position
        vc = VirtualCursor.from_state(state, next_position(state.mark_delete))
        vc.skip_to(self.cursor.mark_delete_position, next_position)
        self.adopted += 1
        return vc

    def remove_consumer(self, consumer: Consumer) -> None:
        vc = self.consumers.pop(consumer, None)
        if vc is None:
            return
        self._queued.discard(consumer)
        self._at_tail.pop(consumer, None)
        self._read_floor.remove(vc.read_position)
        if consumer.connection_lost and self.reconnect_grace > 0 and not self._closed:
            # Its connection was lost: keep its virtual cursor for a while. What it was sent and
            # had not acknowledged is sent again first if it comes back.
            for position in consumer.pending_acks:
                vc.replay.add(position)
            consumer.pending_acks.clear()
            self._detach(consumer.name, vc)
            return
        consumer.pending_acks.clear()
        self._floor.remove(vc.mark_delete)
        if self._saved is not None and not self._closed:
            self._saved.changes[consumer.name] = None  # given up
        if not consumer.connection_lost:
            # Closed by its client: what only it held is released now. A lost connection without
            # a grace period (a broker shutting down loses them all, in any order) releases it at
            # the next ack.
            self._advance_subscription()

    def _detach(self, name: str, vc: VirtualCursor) -> None:
        older = self._detached.keep(name, vc)
        if older is not None:  # two consumers of one name left: the later one's counts
            self._floor.remove(older.mark_delete)

    def _given_up(self, name: str, vc: VirtualCursor) -> None:
        """A detached virtual cursor's grace ended (or the lag policy dropped it)."""
        if self._closed:
            return
        self._floor.remove(vc.mark_delete)
        if self._saved is not None:
            self._saved.changes[name] = None
        self._advance_subscription()

    @property
    def detached(self) -> dict[str, Kept]:
        """The virtual cursors kept for lost connections, by consumer name, in the order they
        were detached (read only)."""
        return self._detached.kept

    def drop_detached(self, name: str) -> None:
        """Give a detached virtual cursor up now, before its grace ends (the lag policy)."""
        self._detached.drop(name)

    def _drop_detached_all(self) -> None:
        for vc in self._detached.clear():
            self._floor.remove(vc.mark_delete)

    def close(self) -> None:
        self.save_state()  # they stay stored: the broker is stopping or the topic unloading
        self._drop_detached_all()
        super().close()

    @property
    def entries_read(self) -> int:
        """Entries read from the entry cache or files: once for all the consumers reading them."""
        return self._reads.entries_read

    def virtual_cursor(self, consumer: Consumer) -> VirtualCursor | None:
        return self.consumers.get(consumer)

    def consumer_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        if consumer.permits > 0:
            self._wake(consumer)

    def on_writable(self, consumer: Consumer) -> None:
        self._wake(consumer)

    def on_new_entries(self) -> None:
        at_tail = self._at_tail
        if at_tail:
            self._at_tail = {}
            queued = self._queued
            woken = [c for c in at_tail if c not in queued] if queued else list(at_tail)
            queued.update(woken)
            self._queue.extend(woken)
            self.schedule()

    def _wake(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self._at_tail.pop(consumer, None)
            self._enqueue(consumer)
            self.schedule()

    def _enqueue(self, consumer: Consumer) -> None:
        if consumer not in self._queued:
            self._queued.add(consumer)
            self._queue.append(consumer)

    # -- acknowledgements and redelivery ----------------------------------------------------
    def acknowledge(self, consumer: Consumer | None, ack: wire.CommandAck) -> bool:
        if consumer is None or (vc := self.consumers.get(consumer)) is None:
            return True
        vc.last_ack = CLOCK.now
        if ack.message_id:
            before = vc.mark_delete
            if broadcast_acks.apply(vc, consumer.pending_acks, ack, self.ml):
                self._acknowledged(consumer, vc, before)
        return True

    def acknowledge_one(self, consumer: Consumer, cumulative: bool, position: Position) -> bool:
        vc = self.consumers.get(consumer)
        if vc is None:
            return True  # not (or no longer) this dispatcher's: nothing to do, as ``acknowledge``
        vc.last_ack = CLOCK.now
        before = vc.mark_delete
        if position <= before or position > self.ml.last_confirmed or position.entry_id < 0:
            return True  # nothing new (a late or repeated ack), or not an entry
        if cumulative:
            vc.ack_through(position)
            broadcast_acks.drop_pending_through(consumer.pending_acks, position)
        else:
            vc.ack(position)
            consumer.pending_acks.pop(position, None)
        self._acknowledged(consumer, vc, before)
        return True

    def _acknowledged(self, consumer: Consumer, vc: VirtualCursor, before: Position) -> None:
        """After acks moved ``vc``: over what else is acknowledged, marked for storage, and
        the subscription's cursor after the slowest consumer."""
        cursor = self.cursor
        vc.advance(self.ml.next_position, cursor.is_acked if cursor.individually_deleted_count() else None)
        if (saved := self._saved) is not None:
            saved.changes[consumer.name] = vc
        if vc.mark_delete != before:
            self._floor.move(before, vc.mark_delete)
            self._advance_subscription()

    def _advance_subscription(self) -> None:
        """Move the stored cursor to the lowest consumer's mark-delete position.

        On a topic's owner the lowest never goes back (every consumer starts at or past the stored
        cursor); a follower's subscription (follower_topic.py) stores nothing and tells the owner
        where its consumers are, which may go back when a consumer joins there."""
        lowest = self._floor.lowest()
        if lowest is not None and lowest != self._applied:
            self._applied = lowest
            self.subscription.mark_delete(lowest)

    def on_mark_delete(self, position: Position) -> None:
        super().on_mark_delete(position)
        position = self.cursor.mark_delete_position
        if position <= self._applied:
            return  # this dispatcher's own move, or nothing new
        # Skip, clear-backlog, expiry or backlog eviction: acknowledged for every consumer.
        self._applied = position
        next_position = self.ml.next_position
        for vc, _ in self._detached.kept.values():
            if vc.mark_delete < position:
                before = vc.mark_delete
                vc.skip_to(position, next_position)
                self._floor.move(before, vc.mark_delete)
        for consumer, vc in self.consumers.items():
            if vc.mark_delete < position:
                before, read_before = vc.mark_delete, vc.read_position
                vc.skip_to(position, next_position)
                self._floor.move(before, vc.mark_delete)
                self._read_floor.move(read_before, vc.read_position)
                for stale in [p for p in consumer.pending_acks if p <= position]:
                    del consumer.pending_acks[stale]
                self._wake(consumer)

    def on_cursor_reset(self, disconnected: Collection[str] = ()) -> None:
        """A seek starts every consumer again at the new position: the connected ones, and those
        kept for their grace (the ones the seek closed among them, with the grace period), so
        that each that comes back resumes there and the subscription waits for it (a worker's
        link to the owner among them: docs/architecture.md, the spread)."""
        super().on_cursor_reset(disconnected)
        self._reads.window.evict_below(None)
        kept = [*self._detached.kept, *disconnected]
        self._drop_detached_all()
        if self._saved is not None:
            self._saved.clear()
        self._applied = start = self.cursor.mark_delete_position
        if self.reconnect_grace > 0 and not self._closed:
            connected = {consumer.name for consumer in self.consumers}
            for name in dict.fromkeys(kept):
                if name not in connected:
                    self._floor.add(start)
                    self._detach(name, VirtualCursor(start, self.ml.next_position(start)))
        for consumer, vc in list(self.consumers.items()):
            self._floor.remove(vc.mark_delete)
            self._read_floor.remove(vc.read_position)
            vc = self.consumers[consumer] = VirtualCursor(start, self.ml.next_position(start))
            if self._saved is not None:
                self._saved.changes[consumer.name] = vc
            self._floor.add(start)
            self._read_floor.add(vc.read_position)
            self._wake(consumer)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        vc = self.consumers.get(consumer)
        if vc is None:
            return
        pending = consumer.pending_acks
        wanted = list(pending) if positions is None else [p for p in positions if p in pending]
        for position in wanted:
            del pending[position]
            vc.replay.add(position)
            vc.redelivery_counts[position] = vc.redelivery_counts.get(position, 0) + 1
        if wanted:
            self._wake(consumer)

    def consumers_at_end(self) -> Iterable[Consumer]:
        last = self.ml.last_confirmed
        return [c for c, vc in self.consumers.items() if vc.mark_delete >= last]

    # -- stats -----------------------------------------------------------------------------
    def stats(self) -> dict:
        return {
            "virtualCursors": len(self.consumers),
            "detachedCursors": len(self._detached),
            **(self._saved.stats() if self._saved is not None else {}),
            "entryReads": self._reads.reads,
            "entriesRead": self._reads.entries_read,
            "lagDisconnects": self.lag_disconnects,
            "adoptedVirtualCursors": self.adopted,
        }

    def consumer_stats(self, consumer: Consumer) -> dict:
        vc = self.consumers.get(consumer)
        if vc is None:
            return {}
        return {
            "markDeletePosition": str(vc.mark_delete),
            "readPosition": str(vc.read_position),
            "ackedPastMarkDelete": vc.acked_count,
        }

    # -- dispatch ---------------------------------------------------------------------------
    def dispatch_round(self) -> bool:
        cursors, queue, queued = self.consumers, self._queue, self._queued
        groups: dict[Position, list[Member]] = {}
        replays: list[Member] = []
        budget = self.fanout_per_round
        while queue and budget > 0:
            consumer = queue.popleft()
            queued.discard(consumer)
            vc = cursors.get(consumer)
            if vc is None or consumer.permits <= 0 or not consumer.writable:
                continue  # a FLOW, a drained socket or a new subscribe queues it again
            budget -= 1
            if vc.replay_queue:
                replays.append((consumer, vc))
            elif (members := groups.get(vc.read_position)) is not None:
                members.append((consumer, vc))
            else:
                groups[vc.read_position] = [(consumer, vc)]
        messages = size = 0
        failed: OffloadedReadError | None = None
        for consumer, vc in replays:
            try:
                sent = self._send_replay(consumer, vc)
            except (OffloadedReadPending, OffloadedReadError) as exc:
                failed = self._await_offloaded([consumer], exc) or failed
                continue
            messages += sent[0]
            size += sent[1]
        for position, members in groups.items():
            try:
                sent = self._send_group(position, members)
            except (OffloadedReadPending, OffloadedReadError) as exc:
                failed = self._await_offloaded([consumer for consumer, _ in members], exc) or failed
                continue
            messages += sent[0]
            size += sent[1]
        if messages:
            for traffic in (self.subscription.traffic, self.subscription.topic.traffic):
                traffic.messages_out += messages
                traffic.bytes_out += size
        self._reads.window.evict_below(self._read_floor.lowest())
        if failed is not None:
            raise failed  # said and tried again by the base (the consumers: ``_await_offloaded``)
        return bool(queue)

    def _await_offloaded(self, consumers: list[Consumer], exc: Exception) -> OffloadedReadError | None:
        """Consumers whose entries are offloaded and being fetched wait with those at the tail: the
        topic wakes its dispatchers once the bytes are there. Where the store fails, they are woken
        again after ``OFFLOAD_RETRY_S``; the error is returned (to be said once per round)."""
        self._at_tail.update(dict.fromkeys(c for c in consumers if c in self.consumers))
        if isinstance(exc, OffloadedReadError):
            asyncio.get_running_loop().call_later(OFFLOAD_RETRY_S, self.on_new_entries)
            return exc
        return None

    def _send_group(
        self, position: Position, members: list[tuple[Consumer, VirtualCursor]]
    ) -> tuple[int, int]:
        """One read for every consumer reading at ``position``, then a write to each; the
        messages and bytes sent.

        The usual case, a consumer with the permits for everything read, is kept short: the
        consumers that read through to ``resume`` move there together in the read floor, and
        those that still have permits wait at the tail (or go round again) together.
        """
        wanted = max(c.permits for c, _ in members)
        entries, resume = self._reads.read(position, wanted)
        at_tail = resume > self.ml.last_confirmed
        outgoing = [OutgoingEntry(e, self.partition_field) for e in entries]
        needed = sum(e.num_messages for e in outgoing)
        send = broadcast_send.send
        through: list[VirtualCursor] = []  # read everything, up to ``resume``
        waiting: list[Consumer] = []  # and have permits left for more
        messages = size = 0
        for consumer, vc in members:
            if vc.restored_until is None and consumer.permits >= needed:
                if outgoing:
                    sent = send(consumer, vc, outgoing)
                    messages += sent[0]
                    size += sent[1]
                through.append(vc)
                if consumer.permits > 0:
                    waiting.append(consumer)
                continue
            sent = self._send_some(consumer, vc, outgoing, resume, at_tail)
            messages += sent[0]
            size += sent[1]
        if through and resume != position:
            self._read_floor.move_many(position, resume, len(through))
            for vc in through:
                vc.read_position = resume
        if waiting:
            if at_tail:
                self._at_tail.update(dict.fromkeys(waiting))
            else:
                for consumer in waiting:
                    self._enqueue(consumer)
        return messages, size

    def _send_some(
        self,
        consumer: Consumer,
        vc: VirtualCursor,
        outgoing: list[OutgoingEntry],
        resume: Position,
        at_tail: bool,
    ) -> tuple[int, int]:
        """``_send_group`` for a consumer with fewer permits than the entries read take, or one
        resumed at a stored virtual cursor."""
        items = outgoing
        if vc.restored_until is not None:  # resumed as stored: skip what it acknowledged
            items = [e for e in outgoing if not vc.is_acked(e.position)]
        if not items:
            self._move_read(vc, resume)
            self._park(consumer, at_tail)
            return 0, 0
        left, taken = consumer.permits, 0
        for item in items:
            if left <= 0:
                break
            left -= item.num_messages
            taken += 1
        if taken == len(items):
            sent = broadcast_send.send(consumer, vc, items)
            self._move_read(vc, resume)
            if consumer.permits > 0:
                self._park(consumer, at_tail)
            return sent
        items = items[:taken]
        sent = broadcast_send.send(consumer, vc, items)
        self._move_read(vc, after(items[-1].position))
        if consumer.permits > 0:
            # Not charged for all it was sent (an MQTT consumer's QoS 0 entries are acknowledged
            # as written): no FLOW will wake it, so it goes on in a later round.
            self._enqueue(consumer)
        return sent

    def _move_read(self, vc: VirtualCursor, position: Position) -> None:
        if position != vc.read_position:
            self._read_floor.move(vc.read_position, position)
            vc.read_position = position
            if vc.restored_until is not None and position > vc.restored_until:
                vc.restored_until = None  # read past every entry it had acknowledged ahead

    def _park(self, consumer: Consumer, at_tail: bool) -> None:
        if at_tail:
            self._at_tail[consumer] = None
        else:
            self._enqueue(consumer)

    def _send_replay(self, consumer: Consumer, vc: VirtualCursor) -> tuple[int, int]:
        """Send again, in publish order, what this consumer asked for; the messages and bytes sent."""
        settled = self.cursor.is_acked
        entries: list[OutgoingEntry] = []
        left = consumer.permits
        recent = self.subscription.topic.recent_entries.entry
        queue = vc.replay
        while len(queue) and left > 0:
            (position,) = queue.pop_first(1)
            if vc.is_acked(position) or settled(position):
                continue
            try:
                item = recent(self.ml.read_entry(position, wait=False))
            except EntryNotFoundError:
                continue  # trimmed by retention since
            except (OffloadedReadPending, OffloadedReadError):
                queue.add(position)  # offloaded: sent once it is fetched
                if entries:
                    break
                raise
            entries.append(OutgoingEntry(item, self.partition_field))
            left -= item.num_messages
        if not len(queue):
            vc.replay_queue = None
        sent = broadcast_send.send(consumer, vc, entries) if entries else (0, 0)
        if consumer.permits > 0:
            self._enqueue(consumer)  # on to new entries in a later round
        return sent
