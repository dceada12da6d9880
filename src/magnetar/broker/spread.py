"""One topic's broadcast fan-out on every worker (docs/architecture.md, the spread): which topics
are spread, and the followers this worker keeps of the spread topics it does not own.

A topic is spread once its owner serves a broadcast subscription on it (``mark``: one row in the
shared ownership store, and a change notice every worker reads, ``refresh``). A LOOKUP of a spread
topic then names the shared service port, so that a consumer stays on the worker its connection
reached; there a durable broadcast SUBSCRIBE is served by a follower (``preparing``), anything
else is sent to the owner (handlers/access.py).

A follower subscription is opened once per topic and subscription: its link to the owner first
(the owner creates the topic and the subscription if they are new, and says how far the topic is
durable and where its stored cursor is), then the topic's files, read-only, on an open thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.coarse_clock import CLOCK
from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.dispatchers.broadcast_lag import LagLimits, sweep_subscription
from magnetar.broker.errors import BrokerError, as_broker_error
from magnetar.broker.follower_topic import (
    FollowerSubscription,
    FollowerTopic,
    LinkEvents,
    OwnerLink,
    link_consumer_name,
    link_worker,
)
from magnetar.protocol import wire
from magnetar.protocol.broadcast import wants_broadcast
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.namespaces import NamespacePolicies
    from magnetar.broker.ownership import BrokerInfo, OwnershipStore
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.protocol.topic_name import TopicName
    from magnetar.storage import Storage

log = logging.getLogger(__name__)

#: Seconds a followed subscription with no consumer (nor one kept for its reconnect grace) stays
#: open, its link with it, before it is closed and the owner lets its place go.
IDLE_LINGER_S = 30.0
#: Seconds a refused HTTP-lookup client's next HTTP lookup is awaited (``Spread.pin_lookup``):
#: longer than a client's operation timeout, over which it retries.
PINNED_LOOKUP_S = 60.0


@dataclass(frozen=True, slots=True)
class LinkTarget:
    """What a link subscribes to on the owner, and as whom."""

    topic: str
    subscription: str
    consumer_name: str
    initial_position: wire.CommandSubscribe.InitialPosition.ValueType
    #: False for MQTT's non-durable broadcast subscription (``MQTT_SUBSCRIBERS``): the owner keeps
    #: no stored cursor for it, and nothing of it is stored here either.
    durable: bool = True


class StartingLink(OwnerLink, Protocol):
    """A link as ``Spread`` opens it."""

    async def start(self) -> tuple[Position, Position]:
        """Subscribe at the owner: how far the topic is durable and where its stored cursor is.
        Raises a BrokerError the SUBSCRIBE that asked is answered with."""
        ...

    def attach(self, events: LinkEvents) -> None:
        """Tell ``events`` from now on (what came before ``start`` returned included)."""
        ...


class LinkFactory(Protocol):
    def __call__(
        self,
        target: LinkTarget,
        owner: Callable[[], BrokerInfo | None],
        me: str,
        resets: Callable[[], int],
    ) -> StartingLink:
        """A link to ``target``'s owner (``owner()`` now) for worker ``me``; ``resets()``: how many
        times the owner noted the subscription reset (``watch_resets``)."""
        ...


class Spread:
    """The spread topics, and this worker's followers of those it does not own."""

    def __init__(
        self,
        config: BrokerConfig,
        store: OwnershipStore,
        shared: bool,
        storage: Callable[[], Storage],
        owner_of: Callable[[TopicName], BrokerInfo | None],
        broker_id: Callable[[], str],
        executor: Callable[[], Executor],
        policies: Callable[[TopicName], Callable[[], NamespacePolicies]],
    ) -> None:
        self.config = config
        self._store = store
        self._shared = shared
        self._storage = storage
        self._owner_of = owner_of
        self._broker_id = broker_id
        self._executor = executor
        self._policies = policies
        #: Makes links to owners (``magnetar.spread``); None: no follower is served here.
        self.link_factory: LinkFactory | None = None
        #: The spread topics, by full name, as of the last change notice.
        self.topics: set[str] = set()
        #: This worker's followers, by topic name.
        self.followers: dict[str, FollowerTopic] = {}
        self._opening: dict[tuple[str, str], asyncio.Future] = {}
        #: When each followed subscription was last seen with no consumer (``sweep``).
        self._idle_since: dict[tuple[str, str], float] = {}

    @property
    def active(self) -> bool:
        """Whether this worker answers and serves spread topics: workers, the setting on, and a
        Pulsar port a link reaches owners on: the plain one, else the TLS one unless it asks every
        client for a certificate (a link has none); with authentication on, a link CONNECTs as
        its worker (``worker_credentials.identity``)."""
        config = self.config
        tls_for_links = (
            config.broker_service_port_tls is not None
            and not config.tls_require_trusted_client_cert_on_connect
        )
        return (
            self._shared and config.broadcast_spread and (config.broker_service_port_enabled or tls_for_links)
        )

    # -- which topics ------------------------------------------------------------------------------
    def is_spread(self, name: TopicName) -> bool:
        return self.active and str(name) in self.topics

    def pin_lookup(self, name: TopicName, host: str) -> None:
        """A request of the spread topic ``name`` only its owner serves was refused here to a
        client at ``host`` that looked it up over HTTP: its next HTTP lookup of it, at any worker,
        names the owner (``lookup_pinned``), as its connection's next LOOKUP would."""
        self._store.pin_lookup(str(name), host, PINNED_LOOKUP_S)

    def lookup_pinned(self, name: TopicName, host: str) -> bool:
        """Whether this HTTP lookup of the spread topic ``name`` from ``host`` names the owner
        (``pin_lookup``); it takes the pin."""
        return self._store.take_pinned_lookup(str(name), host)

    def mark(self, name: TopicName) -> None:
        """The owner serves a broadcast subscription on ``name``: every worker answers its LOOKUPs
        with the shared port from now on."""
        topic = str(name)
        if self.active and topic not in self.topics:
            self.topics.add(topic)
            self._store.mark_spread(topic)

    def watch_resets(self, name: TopicName, subscription: PersistentSubscription) -> None:
        """The owner's broadcast ``subscription`` of ``name`` notes each reset (a seek) in the
        shared store before closing its consumers: each follower's link, subscribing again, finds
        it and starts the follower's consumers over (``FollowerSubscription.on_reset``). And an
        UNSUBSCRIBE there goes through past the followers' links that serve no connected consumer
        (``release_links``)."""
        if self.active and subscription.before_reset is None:
            topic = str(name)
            subscription.before_reset = lambda sub: self._note_reset(topic, sub)
            subscription.release_links = lambda sub, others: self._release_links(topic, sub, others)
            self._read_epoch(topic, subscription)

    def _release_links(
        self, topic: str, subscription: PersistentSubscription, others: list[Consumer]
    ) -> list[Consumer]:
        """An UNSUBSCRIBE of ``subscription`` at its owner, with ``others`` connected: when they are
        all links of followers that noted that no consumer is connected to them
        (``note_link_idle``), those links are closed (each follower lets the subscription go) and
        none holds the UNSUBSCRIBE back; else ``others``, unchanged."""
        workers = [link_worker(consumer.name) for consumer in others]
        if any(worker is None for worker in workers):
            return others  # a consumer of the owner's own: refused as Pulsar refuses it
        try:
            idle = self._store.idle_links(topic, subscription.name)
        except Exception:
            log.exception("reading the idle links of %s/%s failed", topic, subscription.name)
            return others
        if not idle.issuperset(workers):
            return others
        # A follower that got a consumer meanwhile subscribes again: the subscription is made anew
        # there, and the reset noted first starts its consumers over at its stored cursor.
        self._note_reset(topic, subscription)
        for link in others:
            link.close_by_broker()
            link.cnx.forget_consumer(link.consumer_id)
            subscription.remove_consumer_silently(link)
        log.info("%s/%s: unsubscribed past the idle links of %s", topic, subscription.name, sorted(idle))
        return []

    def _note_reset(self, topic: str, subscription: PersistentSubscription) -> None:
        try:
            self._store.note_reset(topic, subscription.name)
        except Exception:  # the seek goes on; the followers' consumers keep their places
            log.exception("noting the reset of %s/%s for its followers failed", topic, subscription.name)
        self._read_epoch(topic, subscription)

    def _read_epoch(self, topic: str, subscription: PersistentSubscription) -> None:
        """The subscription's resets as the shared store counts them: the virtual cursors stored
        from now on carry the count, and those stored before (by any worker) are not resumed."""
        try:
            subscription.reset_epoch = self._store.resets(topic, subscription.name)
        except Exception:
            log.exception("reading the resets of %s/%s failed", topic, subscription.name)

    def refresh(self) -> None:
        """Read the spread topics again (a change notice said another worker marked one)."""
        if self.active:
            self.topics = self._store.spread_topics()

    def follows(self, name: TopicName, cmd: wire.CommandSubscribe) -> bool:
        """Whether this (non-owner) worker serves ``cmd``: a durable broadcast SUBSCRIBE of a spread
        topic, with a link factory to reach the owner."""
        return self.is_spread(name) and self.link_factory is not None and cmd.durable and wants_broadcast(cmd)

    # -- followers ---------------------------------------------------------------------------------
    def follower(self, name: TopicName) -> FollowerTopic | None:
        return self.followers.get(str(name))

    def preparing(self, name: TopicName, cmd: wire.CommandSubscribe) -> asyncio.Future | None:
        """Open the follower subscription ``cmd`` names (link, then files); None when it is open."""
        key = (str(name), cmd.subscription)
        topic = self.followers.get(key[0])
        if topic is not None and cmd.subscription in topic.subscriptions:
            return None
        opening = self._opening.get(key)
        if opening is None:
            opening = asyncio.ensure_future(
                self._open(name, cmd.subscription, cmd.initial_position, cmd.durable)
            )
            self._opening[key] = opening
            opening.add_done_callback(lambda _: self._opening.pop(key, None))
        return opening

    async def _open(
        self,
        name: TopicName,
        subscription: str,
        initial: wire.CommandSubscribe.InitialPosition.ValueType,
        durable: bool = True,
    ) -> None:
        factory = self.link_factory
        if factory is None:
            raise BrokerError(f"{name} is not served by this worker", wire.ServiceNotReady)
        me = self._broker_id()
        target = LinkTarget(str(name), subscription, link_consumer_name(me), initial, durable)
        store = self._store

        def resets() -> int:
            return store.resets(target.topic, subscription)

        link = factory(target, lambda: self._owner_of(name), me, resets)
        try:
            last, stored = await link.start()
            topic = await self._topic(name)
        except BaseException as exc:
            link.close(give_up=True)
            if isinstance(exc, Exception):
                raise as_broker_error(exc, f"following {name}") from exc
            raise
        if self.followers.get(str(name)) is not topic:  # handed back meanwhile: owned here now
            link.close(give_up=True)
            raise BrokerError(f"{name} is served by this worker's own topic now", wire.ServiceNotReady)
        topic.ml.follow(last)
        cursor = topic.ml.cursor_at(stored, subscription)
        follower = FollowerSubscription(topic, subscription, cursor, link, durable)
        follower.owned_here = lambda: self.hand_back(name)
        follower.resets = resets
        follower.reset_epoch = resets()
        follower.note_idle = lambda idle: self._note_idle(target.topic, subscription, me, idle)
        follower.released = lambda released, reset: self._released(name, released, reset)
        follower.connected_changed()  # none yet: idle until the consumer that asked for it joins
        topic.subscriptions[subscription] = follower
        link.attach(follower)
        log.info("%s: following %s/%s at its owner (stored cursor %s)", me, name, subscription, stored)

    def _note_idle(self, topic: str, subscription: str, me: str, idle: bool) -> None:
        try:
            self._store.note_link_idle(topic, subscription, me, idle)
        except Exception:  # an UNSUBSCRIBE elsewhere waits for this link's linger, as before
            log.exception("%s: noting the link to %s/%s idle=%s failed", me, topic, subscription, idle)

    def _released(self, name: TopicName, follower: FollowerSubscription, reset: bool) -> None:
        """The owner closed ``follower``'s link while no consumer was connected here: let the
        subscription go; after a reset (a seek, or an UNSUBSCRIBE deleting it) what was kept
        here for its consumers is forgotten, else written as on closing."""
        topic = self.followers.get(str(name))
        if topic is None or topic.subscriptions.get(follower.name) is not follower:
            return
        if reset:
            topic.delete_subscription(follower.name)
        else:
            topic.remove_subscription(follower.name)

    async def _topic(self, name: TopicName) -> FollowerTopic:
        """The follower of ``name``, its files opened on an open thread if it is new."""
        topic = self.followers.get(str(name))
        if topic is not None:
            return topic
        loop = asyncio.get_running_loop()
        ml = await loop.run_in_executor(
            self._executor(), self._storage().follow_managed_ledger, str(name), self._broker_id()
        )
        topic = self.followers.get(str(name))
        if topic is not None:  # another subscription's open made it meanwhile
            ml.close()
            return topic
        topic = self.followers[str(name)] = FollowerTopic(name, ml, self.config, self._policies(name))
        return topic

    def hand_back(self, name: TopicName) -> None:
        """This worker owns ``name`` now: the follower goes, its consumers' places written first;
        they subscribe again and the topic loaded as this worker's own serves them from there."""
        topic = self.followers.pop(str(name), None)
        if topic is None:
            return
        log.info("%s: %s is owned here now: its followed consumers subscribe again", self._broker_id(), name)
        for subscription in list(topic.subscriptions.values()):
            consumers = list(subscription.consumers)
            if subscription.dispatcher is not None:
                subscription.dispatcher.save_state()
            subscription.close()  # kept as they are: closing consumers now gives nothing up
            for consumer in consumers:
                consumer.close_by_broker()
                consumer.closed = True
                consumer.cnx.forget_consumer(consumer.consumer_id)
        topic.close(give_up=True)

    # -- background --------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write each follower's changed virtual cursors (the cursor flush schedule)."""
        for topic in list(self.followers.values()):
            try:
                topic.flush()
            except Exception:
                log.exception("%s: writing the followed consumers' places failed", topic.name)

    def sweep(self, now: float | None = None) -> None:
        """Close followed subscriptions idle for ``IDLE_LINGER_S`` (the owner lets their places go),
        and followers left with none."""
        now = time.monotonic() if now is None else now
        for name, topic in list(self.followers.items()):
            for sub_name, subscription in list(topic.subscriptions.items()):
                key = (name, sub_name)
                if not subscription.idle:
                    self._idle_since.pop(key, None)
                    continue
                since = self._idle_since.setdefault(key, now)
                if now - since >= IDLE_LINGER_S:
                    del self._idle_since[key]
                    subscription.close_link(give_up=True)
                    topic.remove_subscription(sub_name)
            if not topic.subscriptions:
                del self.followers[name]
                topic.close()
        for key in list(self._idle_since):  # gone otherwise (an unsubscribe, a hand back): forgotten
            follower = self.followers.get(key[0])
            if follower is None or key[1] not in follower.subscriptions:
                del self._idle_since[key]

    def update_rates(self) -> None:
        """The followers' rates over the stats interval just ended (as ``housekeeping.update_rates``
        for the owned topics): what the topic's stats at its owner show of this worker's consumers."""
        now = time.monotonic()
        for topic in list(self.followers.values()):
            topic.traffic.update_rates(now)
            for subscription in list(topic.subscriptions.values()):
                subscription.traffic.update_rates(now)
                for consumer in list(subscription.consumers):
                    consumer.traffic.update_rates(now)

    def sweep_lag(self, limits: LagLimits) -> None:
        """The broadcast lag policy over the followed subscriptions (after ``sweep_broadcast``
        ticked the clock), as over the owned ones."""
        if not limits.enabled:
            return
        now = CLOCK.now
        for topic in list(self.followers.values()):
            for subscription in list(topic.subscriptions.values()):
                if isinstance(subscription.dispatcher, BroadcastDispatcher):
                    sweep_subscription(subscription.dispatcher, limits, now)

    def close(self) -> None:
        """The worker stops: every follower's places written, links dropped (not given up: the
        owner keeps them for their grace while the consumers go to other workers)."""
        for topic in list(self.followers.values()):
            try:
                topic.flush()
            except Exception:
                log.exception("%s: writing the followed consumers' places failed", topic.name)
            topic.close(give_up=False)
        self.followers.clear()
        for opening in list(self._opening.values()):
            opening.cancel()
