"""What every dispatcher shares: its consumers, flow permits and a coalesced dispatch loop."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from magnetar.broker import descriptors, loop_pass
from magnetar.broker.entries import DispatchEntry
from magnetar.broker.errors import ServiceNotReady
from magnetar.broker.offload_failures import OFFLOAD_READ_FAILURES, OFFLOAD_RETRY_S
from magnetar.protocol import wire
from magnetar.storage.errors import OffloadedReadError, OffloadedReadPending
from magnetar.storage.owner_ref import OwnerRef
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.topic_api import CursorSubscription

#: Most bytes one read may take from storage for one dispatch round.
MAX_READ_BYTES = 5 * 1024 * 1024
#: A read refused for want of descriptors is tried again after this many seconds.
READ_RETRY_S = 0.5


class Dispatcher(ABC):
    """Moves entries from the subscription's cursor to its consumers, within their permits.

    Dispatch runs in rounds on the event loop: each round reads at most ``max_read_batch``
    entries, then schedules the next round, so one busy subscription never starves others.
    Any event that can enable progress (permits, new entries, acks, redelivery, consumer
    changes) calls ``schedule()``; rounds coalesce, so there is at most one pending.
    """

    #: Its consumers: a list in subscribe order, or the broadcast dispatcher's consumers and
    #: their virtual cursors (each subclass makes its own).
    consumers: Collection[Consumer]

    @property
    def subscription(self) -> CursorSubscription[Consumer]:
        return self._subscription()

    def __init__(self, subscription: CursorSubscription[Consumer], max_read_batch: int = 100) -> None:
        #: Held weakly: the subscription owns its dispatcher (storage/owner_ref.py).
        self._subscription = OwnerRef(subscription, "subscription", subscription.name, ServiceNotReady)
        self.cursor = subscription.cursor
        self.max_read_batch = max_read_batch
        #: How often each position was redelivered on request (nack, ack timeout).
        self.redelivery_counts: dict[Position, int] = {}
        self._scheduled = False
        self._closed = False
        self._passes: loop_pass.PassScheduler | None = None
        #: Consumers with a chunked message queued to go again (``Consumer.send_queued``): each
        #: round sends them a slice before anything else.
        self.queued: set[Consumer] = set()

    # -- consumers -------------------------------------------------------------------------
    @abstractmethod
    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer; raise a BrokerError if this subscription type refuses it."""

    @abstractmethod
    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; what it had not acknowledged goes to the others."""

    def consumer_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.schedule()

    def on_writable(self, consumer: Consumer) -> None:
        """The consumer's connection takes writes again."""
        self.schedule()

    def on_new_entries(self) -> None:
        """Entries were stored on the topic."""
        self.schedule()

    # -- acknowledgements and redelivery ----------------------------------------------------
    def acknowledge(self, consumer: Consumer | None, ack: wire.CommandAck) -> bool:
        """Take an ACK that this dispatcher keeps per consumer; False leaves it to the
        subscription's cursor (every dispatcher but the broadcast one)."""
        return False

    def acknowledge_one(self, consumer: Consumer, cumulative: bool, position: Position) -> bool:
        """``acknowledge`` for an ACK of one message id without batch bits, read without
        protobuf (``protocol.hot_acks``); False: not taken here, pass the command instead."""
        return False

    def consumers_at_end(self) -> Iterable[Consumer]:
        """The consumers that have acknowledged everything stored (for REACHED_END_OF_TOPIC)."""
        return self.consumers if self.cursor.backlog() == 0 else ()

    @abstractmethod
    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Send again what ``consumer`` has not acknowledged (all of it when positions is None)."""

    def on_acknowledged(self, positions: Iterable[Position]) -> None:
        """Entries are fully acknowledged: forget their delivery state."""
        for position in positions:
            self.redelivery_counts.pop(position, None)

    def on_mark_delete(self, position: Position) -> None:
        """Everything up to ``position`` is acknowledged (cumulative ack)."""
        if self.redelivery_counts:
            for stale in [p for p in self.redelivery_counts if p <= position]:
                del self.redelivery_counts[stale]

    def on_cursor_reset(self, disconnected: Collection[str] = ()) -> None:
        """The cursor moved (seek): all delivery state is void. ``disconnected``: the names of the
        consumers the seek closed (they subscribe again)."""
        self.redelivery_counts.clear()
        for consumer in self.consumers:
            consumer.pending_acks.clear()

    def bump_redelivery(self, positions: Iterable[Position]) -> None:
        counts = self.redelivery_counts
        for position in positions:
            counts[position] = counts.get(position, 0) + 1

    def drop_state(self) -> None:
        """Forget what this dispatcher keeps durable: the subscription changes kind (none by default)."""
        return

    def save_state(self) -> None:
        """Hand what this dispatcher keeps durable to storage before a cursor flush (none by default)."""
        return

    # -- stats -----------------------------------------------------------------------------
    def stats(self) -> dict:
        """Figures of this kind of dispatcher for the subscription's stats (none by default)."""
        return {}

    def consumer_stats(self, consumer: Consumer) -> dict:
        """Figures of one consumer that this kind of dispatcher keeps (none by default)."""
        return {}

    # -- dispatch loop -------------------------------------------------------------------
    def schedule(self) -> None:
        if not self._scheduled and not self._closed:
            self._scheduled = True
            if self._passes is None:
                self._passes = loop_pass.current()
            self._passes.defer(loop_pass.DISPATCH, self._run_round)

    def _run_round(self) -> None:
        self._scheduled = False
        if self._closed:
            return
        more = self._send_queued() if self.queued else False
        try:
            progress = self.dispatch_round()
        except OffloadedReadPending:
            return  # the topic wakes its dispatchers when the bytes are fetched
        except OffloadedReadError as exc:
            # The object store fails: said (throttled), and tried again; local topics go on.
            OFFLOAD_READ_FAILURES.failed(f"{self.subscription.topic.name}/{self.subscription.name}: {exc}")
            asyncio.get_running_loop().call_later(OFFLOAD_RETRY_S, self.schedule)
            return
        except OSError as exc:
            if not descriptors.is_exhaustion(exc):
                raise
            # The topic's ledger files were closed (max_open_ledger_files) and cannot reopen now:
            # said and counted (throttled), and the read is tried again until descriptors are back.
            descriptors.EXHAUSTION.refused("read", f"{self.subscription.topic.name}: {exc}")
            asyncio.get_running_loop().call_later(READ_RETRY_S, self.schedule)
            return
        if progress or more:
            self.schedule()

    def sent_to(self, consumer: Consumer) -> None:
        """Entries went to ``consumer``: if it queued some to go again, later rounds send them."""
        if consumer.has_queued:
            self.queued.add(consumer)
            self.schedule()

    def _send_queued(self) -> bool:
        """A slice to each consumer with something queued; True while one could take more now."""
        more = False
        for consumer in list(self.queued):
            consumer.send_queued(self.redelivery_counts)
            if not consumer.has_queued or consumer.closed:
                self.queued.discard(consumer)
            elif consumer.cnx.writable and consumer.permits > 0:
                more = True
        return more

    @abstractmethod
    def dispatch_round(self) -> bool:
        """Send what can be sent now (one bounded read); True if another round may make progress."""

    def read_from_cursor(self, max_messages: int) -> list[DispatchEntry]:
        count = max(1, min(max_messages, self.max_read_batch))
        recent = self.subscription.topic.recent_entries.entry
        # Offloaded entries are not waited for on the loop: OffloadedReadPending ends the round,
        # and the topic wakes its dispatchers once they are fetched (docs/tiered-storage.md).
        return [recent(e) for e in self.cursor.read_entries(count, MAX_READ_BYTES, wait=False)]

    def close(self) -> None:
        self._closed = True
