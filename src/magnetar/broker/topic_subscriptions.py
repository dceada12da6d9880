"""Opening a persistent topic's subscriptions: by a consumer's SUBSCRIBE (durable or a reader's
non-durable one), prepared off the loop (the cursor's files opened and stored on an executor's
threads), by the admin API at a given position, and dropped by it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.broker import descriptors
from magnetar.broker.consumer import Consumer
from magnetar.broker.errors import NotAllowed, ServiceNotReady
from magnetar.broker.ids import is_earliest, is_latest, position_of
from magnetar.broker.namespaces import AlreadyExists
from magnetar.broker.subscription import PersistentSubscription
from magnetar.protocol import wire
from magnetar.protocol.broadcast import wants_broadcast
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.owner_ref import OwnerRef
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.topic_api import LedgerTopic

log = logging.getLogger(__name__)


class SubscriptionOpener:
    """Puts new subscriptions in ``subscriptions`` (the topic's own dict: the opener is part of
    the topic, and names it only as a ``LedgerTopic``)."""

    def __init__(self, topic: LedgerTopic, subscriptions: dict[str, PersistentSubscription]) -> None:
        #: Held weakly: the topic owns its opener (storage/owner_ref.py).
        self._owner = OwnerRef(topic, "topic", topic.name, ServiceNotReady)
        self._subscriptions = subscriptions
        #: Durable subscriptions being created on an open thread, by name (``prepare``).
        self._preparing: dict[str, asyncio.Future] = {}
        #: Those created so, until their first SUBSCRIBE: it created them (``_from_earliest``).
        #: Made at first use: an empty set is 216 bytes, for each of 100,000 loaded topics.
        self._prepared_new: set[str] | None = None

    @property
    def _topic(self) -> LedgerTopic:
        return self._owner()

    @property
    def preparing(self) -> bool:
        """Whether durable subscriptions are being created on an open thread now."""
        return bool(self._preparing)

    def subscribe(
        self, consumer_factory: Callable[[PersistentSubscription], Consumer], cmd: wire.CommandSubscribe
    ) -> Consumer:
        """The consumer ``consumer_factory`` makes, added to the subscription ``cmd`` names
        (created first if there is none); a non-durable subscription it leaves empty is removed."""
        topic = self._topic
        name = cmd.subscription
        if cmd.read_compacted and cmd.sub_type not in _READ_COMPACTED_TYPES:
            raise NotAllowed(
                "readCompacted only allowed on failover or exclusive subscriptions"
            )  # Pulsar's words
        subscription = self._subscriptions.get(name)
        prepared_new = self._prepared_new
        created = subscription is None or (prepared_new is not None and name in prepared_new)
        if prepared_new is not None:
            prepared_new.discard(name)
        if subscription is None:
            subscription = self._create(cmd)
        consumer = consumer_factory(subscription)
        consumer.read_compacted = cmd.read_compacted
        try:
            subscription.add_consumer(consumer, cmd.sub_type, broadcast=wants_broadcast(cmd))
        except Exception:
            if not subscription.durable and not subscription.consumers:
                topic.remove_subscription(name)
            raise
        # Placed before its first read: the dispatcher reads on a later pass of the loop.
        if cmd.read_compacted:
            self._place_in_view(subscription, cmd, created)
        elif subscription.durable and not any(c.read_compacted for c in subscription.consumers):
            # Plain consumers read no compacted view: what is left of it before the topic's first
            # entry (a readCompacted consumer's place there) is behind this subscription from now on.
            subscription.mark_delete(topic.ml.before_first())
        return consumer

    def _place_in_view(
        self, subscription: PersistentSubscription, cmd: wire.CommandSubscribe, created: bool
    ) -> None:
        """Start a readCompacted consumer's subscription in the compacted view where it begins
        before the topic's first entry (ledgers trimmed since hold the rest of its messages): a
        reader's or a new subscription's at the earliest message at the view's first message, a
        reader's from a given message (a reconnect's last one) at that message. A new durable
        subscription's place is stored at once, so a restart finds it there."""
        topic = self._topic
        cursor = subscription.cursor
        earliest = cmd.initial_position == wire.CommandSubscribe.Earliest
        if subscription.durable:  # where it is, unless this SUBSCRIBE created it
            if not (created and earliest):
                return
            start, exactly = topic.compaction.earliest()
        elif not cmd.HasField("start_message_id"):
            if not earliest:
                return
            start, exactly = topic.compaction.earliest()
        elif is_earliest(cmd.start_message_id):
            start, exactly = topic.compaction.earliest()
        elif is_latest(cmd.start_message_id):
            return
        else:
            start = position_of(cmd.start_message_id)
            exactly = start < topic.ml.before_first()
        if not exactly or start >= cursor.read_position:
            return
        cursor.reset_exactly(start)
        if subscription.durable:
            topic.ml.persist_cursors([cursor])

    async def prepare(self, name: str, initial: str, executor) -> None:
        """Create the durable subscription ``name`` with its cursor stored on ``executor``'s
        threads (files, fsync, commit), then in use on the loop; no-op if it exists."""
        if name in self._subscriptions or not name:
            return
        preparing = self._preparing.get(name)
        if preparing is None:
            loop = asyncio.get_running_loop()
            preparing = loop.run_in_executor(executor, self._prepare_cursor, name, initial)
            self._preparing[name] = preparing
            preparing.add_done_callback(lambda done: self._prepared(name, done))
        await asyncio.shield(preparing)

    def _prepare_cursor(self, name: str, initial: str) -> ManagedCursor:
        """On an open thread: the new durable cursor, stored; PersistenceError when its files
        cannot be opened (the descriptors left are the reserve, EMFILE ...)."""
        what = f"{name} on {self._topic.name}"
        try:
            descriptors.check_reserve("subscription", what)
            return self._topic.ml.prepare_cursor(name, initial)
        except OSError as exc:
            raise descriptors.storage_error("subscription", what, exc) from None

    def _prepared(self, name: str, done: asyncio.Future) -> None:
        del self._preparing[name]
        if done.cancelled() or done.exception() is not None:
            return
        topic = self._topic
        try:
            cursor = topic.ml.adopt_cursor(done.result())
        except Exception:
            log.exception("%s: subscription %s could not be put in use", topic.name, name)
            return
        if name not in self._subscriptions:
            self._subscriptions[name] = PersistentSubscription(topic, name, cursor, durable=True)
            if self._prepared_new is None:
                self._prepared_new = set()
            self._prepared_new.add(name)

    def _create(self, cmd: wire.CommandSubscribe) -> PersistentSubscription:
        topic = self._topic
        name = cmd.subscription
        if not name:
            raise NotAllowed("subscription name is empty")
        if cmd.durable:
            initial = "earliest" if cmd.initial_position == wire.CommandSubscribe.Earliest else "latest"
            try:
                descriptors.check_reserve("subscription", f"{name} on {topic.name}")
                cursor = topic.ml.open_cursor(name, initial_position=initial)
            except OSError as exc:
                raise descriptors.storage_error("subscription", f"{name} on {topic.name}", exc) from None
        else:
            cursor = topic.ml.new_non_durable_cursor(self._reader_start(cmd))
        subscription = PersistentSubscription(topic, name, cursor, durable=cmd.durable)
        self._subscriptions[name] = subscription
        return subscription

    def _reader_start(self, cmd: wire.CommandSubscribe) -> Position:
        """First entry a non-durable subscription reads.

        A given message id starts at its own entry whether or not it is inclusive: the
        client drops what precedes its start id (inside a batch, too).
        """
        ml = self._topic.ml
        if cmd.HasField("start_message_id"):
            msg_id = cmd.start_message_id
            if is_latest(msg_id):
                return ml.next_position(ml.last_confirmed)
            if not is_earliest(msg_id):
                return position_of(msg_id)
        elif cmd.initial_position == wire.CommandSubscribe.Latest:
            return ml.next_position(ml.last_confirmed)
        return ml.first_position() or ml.next_position(ml.last_confirmed)

    def create_at(self, name: str, start: Position) -> None:
        """The admin API's: a durable subscription with no consumer yet, whose first entry to
        deliver is ``start``."""
        topic = self._topic
        if not name:
            raise NotAllowed("subscription name is empty")
        if name in self._subscriptions:
            raise AlreadyExists(f"Subscription {name} already exists for topic {topic.name}")
        cursor = topic.ml.open_cursor(name, initial_position="latest")
        cursor.reset(start)
        self._subscriptions[name] = PersistentSubscription(topic, name, cursor, durable=True)


_READ_COMPACTED_TYPES = (wire.CommandSubscribe.Exclusive, wire.CommandSubscribe.Failover)
