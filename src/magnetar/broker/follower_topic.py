"""A follower: what a worker keeps of a topic whose broadcast consumers it serves without owning
the topic (docs/architecture.md, the spread).

A worker's MQTT clients of such a topic follow it too, on MQTT's broadcast subscription
(``MQTT_SUBSCRIBERS``, not durable: nothing of it is stored, here or at the owner).

Its entries are the owner's, read from the topic's files (``storage.FollowedLedger``); how far they
are durable comes over a *link* to the owner, one broadcast consumer of each subscription followed
(``OwnerLink``, made by ``magnetar.spread``). Each followed subscription has its own broadcast
dispatcher and virtual cursors here, over a cursor kept in memory at the subscription's stored
cursor as the owner says it: consumers join there, and acknowledgements stay here. What the
dispatcher would store as the subscription's cursor, the lowest place of its consumers, goes to
the owner instead (``mark_delete``): the link acknowledges it, so that the owner's stored cursor
is at the slowest consumer of every worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from magnetar.broker import loop_pass
from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.entries import RecentEntries
from magnetar.broker.entry_search import EntryReader
from magnetar.broker.errors import BrokerError, ConsumerBusy, NotAllowed, as_broker_error
from magnetar.broker.seek import last_message_position, position_for_time
from magnetar.broker.subscription import PersistentSubscription
from magnetar.broker.subscription_type import SubTypeValue
from magnetar.broker.topic_api import PublishCallback
from magnetar.broker.traffic import Traffic
from magnetar.protocol import wire
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.entry import Entry
from magnetar.storage.followed_ledger import FollowedLedger
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.namespaces import NamespacePolicies
    from magnetar.broker.producer import Producer
    from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)

#: The start of the name each follower's link consumer has on the owner's subscription.
LINK_CONSUMER_PREFIX = "magnetar.spread."
#: The broadcast subscription that MQTT's clients of sessions ending with their connection share
#: (docs/mqtt.md): not durable, and followed on any topic, spread or not (mqtt/subscriptions.py).
MQTT_SUBSCRIBERS = "mqtt-subscribers"


def link_consumer_name(broker_id: str) -> str:
    """The name of ``broker_id``'s link consumer: the owner keeps its virtual cursor by it."""
    return f"{LINK_CONSUMER_PREFIX}{broker_id}"


def link_worker(consumer_name: str) -> str | None:
    """The worker whose link a consumer of this name is (its rejoin name ``....b`` too), else None."""
    if not consumer_name.startswith(LINK_CONSUMER_PREFIX):
        return None
    worker = consumer_name[len(LINK_CONSUMER_PREFIX) :]
    return worker.removesuffix(".b") or None


class OwnerLink(Protocol):
    """A follower's link to the owner, as the follower's subscription sees it (``magnetar.spread``
    makes it): one broadcast consumer of the subscription on the owner."""

    def acknowledge(self, position: Position) -> None:
        """The follower's consumers have all acknowledged up to ``position`` (cumulatively); it may
        be behind what was acknowledged before (a consumer joined behind the others)."""
        ...

    def close(self, give_up: bool) -> None:
        """Stop; with ``give_up`` the owner drops the link's place at once (no consumer left here),
        else it keeps it for its reconnect grace (this worker is stopping or dying)."""
        ...

    async def seek(self, seek: wire.CommandSeek) -> Position:
        """SEEK the subscription at the owner (``seek``'s message id or publish time); the owner
        closes every consumer, the link's too, which subscribes again there: returns the stored
        cursor it finds then. Raises the BrokerError the consumer that asked is answered with."""
        ...

    async def unsubscribe(self) -> None:
        """UNSUBSCRIBE at the owner, which deletes the subscription (the places every worker kept
        with it) if the link is its only connected consumer. Raises as ``seek``."""
        ...


class LinkEvents(Protocol):
    """What a link tells the follower's subscription (``FollowerSubscription`` implements it)."""

    def on_durable(self, position: Position) -> None:
        """The owner made everything up to ``position`` durable."""
        ...

    def on_stored_cursor(self, position: Position) -> None:
        """The subscription's stored cursor is at ``position`` on the owner."""
        ...

    def on_reset(self, position: Position) -> None:
        """The owner reset the subscription (a seek asked by any worker's consumer, or the admin
        API's reset); the link, subscribed again, found the stored cursor at ``position``: every
        consumer here starts over there."""
        ...

    def on_owned_here(self) -> None:
        """This worker owns the topic now: the follower must go (its consumers subscribe again)."""
        ...

    def on_closed_by_owner(self, reset: bool) -> bool:
        """The owner closed the link's consumer (an UNSUBSCRIBE it let go of this idle link, an
        unload, a seek: ``reset`` when the owner noted one). True when no consumer is connected
        here: the subscription is let go here (the link closes, and does not subscribe again,
        which would make a deleted subscription anew); False: the link subscribes again."""
        ...


class _NoCompactedView:
    """A follower serves broadcast subscriptions only; none reads a compacted view."""

    horizon: Position | None = None

    def read_compacted(self, start: Position, max_entries: int, max_bytes: int) -> list[Entry]:
        return []

    def earliest(self) -> tuple[Position, bool]:
        return Position(-1, -1), False


class FollowerTopic:
    """A topic as a follower sees it: a ``LedgerTopic`` over a followed ledger, whose only
    subscriptions are the broadcast ones it follows (``FollowerSubscription``)."""

    def __init__(
        self,
        name: TopicName,
        ml: FollowedLedger,
        config: BrokerConfig,
        policies: Callable[[], NamespacePolicies] | None = None,
    ) -> None:
        self.name = name
        self.ml = ml
        self.config = config
        self.policies = policies
        self.partition_index = name.partition_index
        self.traffic = Traffic()
        self.recent_entries = RecentEntries()
        self.compaction = _NoCompactedView()
        self.subscriptions: dict[str, FollowerSubscription] = {}
        self.replication_cursors: dict[str, ManagedCursor] = {}
        self.producers: dict[tuple[int, int], Producer] = {}
        self.topic_epoch = 0
        self._wake_scheduled = False
        self._passes: loop_pass.PassScheduler | None = None
        #: Offloaded entries a dispatcher could not wait for are fetched: read again (tiered storage).
        ml.on_offloaded_data = self._wake

    @property
    def terminated(self) -> bool:
        return False  # the owner tells its own consumers; a follower's keep receiving what is stored

    # -- what the owner said ---------------------------------------------------------------------
    def follow(self, position: Position) -> None:
        """Entries up to ``position`` are durable: readable here; the dispatchers are woken once
        per pass, however many notices came in it."""
        if self.ml.closed or not self.ml.follow(position):
            return
        if not self._wake_scheduled:
            self._wake_scheduled = True
            if self._passes is None:
                self._passes = loop_pass.current()
            self._passes.defer(loop_pass.WAKE, self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        for subscription in list(self.subscriptions.values()):
            subscription.notify_new_entries()

    # -- consumers ---------------------------------------------------------------------------------
    def subscribe(
        self, consumer_factory: Callable[[PersistentSubscription], Consumer], cmd: wire.CommandSubscribe
    ) -> Consumer:
        """A broadcast consumer of a subscription followed here (``Spread.preparing`` made it)."""
        subscription = self.subscriptions.get(cmd.subscription)
        if subscription is None:
            raise NotAllowed(f"subscription {cmd.subscription} of {self.name} is not followed here")
        consumer = consumer_factory(subscription)
        subscription.add_consumer(consumer, cmd.sub_type, broadcast=True)
        return consumer

    def last_message_position(
        self, read_compacted: bool = False, read: EntryReader | None = None
    ) -> tuple[Position, int]:
        """The last durable entry as the owner said it (no compacted view here)."""
        return last_message_position(self.ml, read)

    def find_position_by_time(self, timestamp_ms: int, read: EntryReader | None = None) -> Position:
        return position_for_time(self.ml, timestamp_ms, read)

    def remove_subscription(self, name: str) -> None:
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None:
            subscription.close()

    def delete_subscription(self, name: str) -> None:
        """Unsubscribed at the owner, which deleted the cursor with every worker's places: nothing
        kept here is written again."""
        self.remove_subscription(name)
        self.ml.forget_cursor(name)

    @property
    def idle(self) -> bool:
        """No consumer here, and no virtual cursor kept for one that may come back."""
        return all(s.idle for s in self.subscriptions.values())

    # -- what producers would ask: the owner's ---------------------------------------------------
    def last_sequence_id(self, producer_name: str) -> int:
        return -1

    def publish(
        self,
        producer: Producer,
        send: wire.CommandSend,
        headers_and_payload: memoryview,
        callback: PublishCallback,
        metadata: wire.MessageMetadata | None = None,
    ) -> None:
        raise NotAllowed(f"{self.name} is written at its owner only")

    def remove_producer(self, producer: Producer) -> None:
        return

    # -- lifecycle ---------------------------------------------------------------------------------
    def flush(self) -> None:
        """Hand the consumers' virtual cursors to storage and write them (this worker's own rows);
        the ledgers the owner trimmed are forgotten."""
        for subscription in self.subscriptions.values():
            if subscription.dispatcher is not None:
                subscription.dispatcher.save_state()
        self.ml.flush_cursors()
        self.ml.refresh()

    def close(self, give_up: bool = False) -> None:
        """Close the subscriptions (their links: given up, or kept at the owner for its grace) and
        the files, after writing the virtual cursors."""
        for subscription in list(self.subscriptions.values()):
            subscription.close_link(give_up)
            subscription.close()
        self.subscriptions.clear()
        self.ml.close()


class FollowerSubscription(PersistentSubscription):
    """A broadcast subscription followed here: its cursor is the owner's stored cursor, as the owner
    says it; its consumers' floor is told to the owner through the link."""

    def __init__(
        self, topic: FollowerTopic, name: str, cursor: ManagedCursor, link: OwnerLink, durable: bool = True
    ) -> None:
        super().__init__(topic, name, cursor, durable)
        self.follower_topic = topic
        self.link = link
        #: Called when the topic became this worker's own (``on_owned_here``).
        self.owned_here: Callable[[], None] | None = None
        #: Told True when no consumer is connected here any more, False when one is again or the
        #: subscription closes here (the owner lets an UNSUBSCRIBE through past a link that
        #: serves none: ``OwnershipStore.note_link_idle``).
        self.note_idle: Callable[[bool], None] | None = None
        #: Called with this subscription when the owner closed the link while no consumer was
        #: connected here (and whether the owner noted a reset).
        self.released: Callable[[FollowerSubscription, bool], None] | None = None
        self._connected: bool | None = None
        #: How many resets of the subscription the owner noted (the shared store's count): read
        #: again at each reset, as ``reset_epoch``.
        self.resets: Callable[[], int] | None = None

    @property
    def idle(self) -> bool:
        """No consumer, and no virtual cursor kept for one that lost its connection."""
        dispatcher = self.dispatcher
        if dispatcher is None:
            return True
        detached = dispatcher.detached if isinstance(dispatcher, BroadcastDispatcher) else {}
        return not dispatcher.consumers and not detached

    def add_consumer(self, consumer: Consumer, sub_type: SubTypeValue, broadcast: bool = False) -> None:
        if not broadcast:
            raise NotAllowed(f"only broadcast consumers of {self.topic.name} are served here")
        super().add_consumer(consumer, sub_type, broadcast)
        self.connected_changed()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Kept when its last consumer goes, durable or not (MQTT's is not): the sweep closes it,
        and its link, once it has been idle a while (``Spread.sweep``)."""
        self.remove_consumer_silently(consumer)

    def remove_consumer_silently(self, consumer: Consumer) -> None:
        super().remove_consumer_silently(consumer)
        self.connected_changed()

    def connected_changed(self) -> None:
        """Tell ``note_idle`` whether no consumer is connected here, if that changed."""
        connected = bool(self.consumers)
        if connected is not self._connected:
            self._connected = connected
            if self.note_idle is not None:
                self.note_idle(not connected)

    def close(self) -> None:
        super().close()
        if self._connected is False and self.note_idle is not None:
            self.note_idle(False)  # no link of this worker's is left to let go
        self._connected = True

    def mark_delete(self, position: Position) -> None:
        """The dispatcher's lowest consumer: told to the owner, which stores the cursor."""
        self.link.acknowledge(position)

    # -- LinkEvents --------------------------------------------------------------------------------
    def on_durable(self, position: Position) -> None:
        self.follower_topic.follow(position)

    def on_stored_cursor(self, position: Position) -> None:
        """A skip, clear-backlog, expiry or eviction at the owner (or the other workers' consumers
        moving on): what is before the stored cursor is acknowledged for every consumer here too."""
        if position <= self.cursor.mark_delete_position or position > self.topic.ml.last_confirmed:
            return
        self.cursor.mark_delete(position)
        if self.dispatcher is not None:
            self.dispatcher.on_mark_delete(position)

    def on_reset(self, position: Position) -> None:
        log.info("%s/%s reset at its owner to %s: starting over", self.topic.name, self.name, position)
        self.start_over(position)

    def on_owned_here(self) -> None:
        if self.owned_here is not None:
            self.owned_here()

    def on_closed_by_owner(self, reset: bool) -> bool:
        if self.consumers:
            return False
        log.info("%s/%s: let go here (closed by its owner with no consumer here)", self.topic.name, self.name)
        if self.released is not None:
            self.released(self, reset)
        return True

    # -- what the owner does, asked through the link ---------------------------------------------
    def start_over(self, position: Position) -> None:
        """The owner's subscription was reset to ``position`` (its stored cursor): as the owner does
        with its own, every consumer here is closed (its client subscribes again) and each virtual
        cursor starts there (kept for its grace till it is back); those stored here are deleted at
        the next flush."""
        if self.resets is not None:
            try:
                self.reset_epoch = self.resets()
            except Exception:  # its consumers start over all the same
                log.exception("%s/%s: reading its resets failed", self.topic.name, self.name)
        disconnected = self.disconnect_all()
        self.cursor.reset(self.follower_topic.ml.next_position(position))
        if self.dispatcher is not None:
            self.dispatcher.on_cursor_reset(disconnected)

    def seek(self, seek: wire.CommandSeek, done: Callable[[BrokerError | None], None]) -> None:
        """A consumer here asked to SEEK: the owner resets the subscription (the link asks it),
        then this worker's consumers start over at the new stored cursor; ``done`` answers the SEEK.
        The other workers' consumers start over when their links find the reset (``on_reset``)."""

        def finished(task: asyncio.Future[Position]) -> None:
            error = _failure(task, f"seeking {self.name} of {self.topic.name} at its owner")
            if error is None:
                self.start_over(task.result())
            done(error)

        asyncio.ensure_future(self.link.seek(seek)).add_done_callback(finished)

    def unsubscribe_at_owner(self, consumer: Consumer, done: Callable[[BrokerError | None], None]) -> None:
        """A consumer here asked to UNSUBSCRIBE: refused while another consumer here is connected,
        as the owner refuses it while another is connected there (each worker's link counts as
        one); else asked of the owner, which deletes the subscription and every worker's places
        with it; then it is gone here too. ``done`` answers the UNSUBSCRIBE."""
        if any(other is not consumer for other in self.consumers):
            raise ConsumerBusy(f"Subscription {self.name} has other connected consumers")

        def finished(task: asyncio.Future[None]) -> None:
            error = _failure(task, f"unsubscribing {self.name} of {self.topic.name} at its owner")
            if error is None:
                consumer.leave_chunk_watch(keep=False)
                self.remove_consumer_silently(consumer)
                self.disconnect_all()  # one that joined meanwhile subscribes again: a new subscription
                self.link.close(give_up=False)  # its consumer went with the subscription
                self.follower_topic.delete_subscription(self.name)
            done(error)

        asyncio.ensure_future(self.link.unsubscribe()).add_done_callback(finished)

    # -- what only the owner does ------------------------------------------------------------------
    def unsubscribe(self, consumer: Consumer) -> None:
        raise NotAllowed(f"unsubscribe from {self.name} through its owner (unsubscribe_at_owner)")

    def reset_cursor(self, position: Position, exactly: bool = False) -> None:
        raise NotAllowed(f"seek on {self.name} at the owner of {self.topic.name}")

    def close_link(self, give_up: bool) -> None:
        self.link.close(give_up)


def _failure(task: asyncio.Future, what: str) -> BrokerError | None:
    """What a request forwarded to the owner is answered with: None when it was done there."""
    if task.cancelled():
        return BrokerError(f"{what}: the link to the owner closed", wire.ServiceNotReady)
    error = task.exception()
    if error is None:
        return None
    return as_broker_error(error, what) if isinstance(error, Exception) else BrokerError(f"{what}: {error}")
