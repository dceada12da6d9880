"""Pulsar's ``NamespaceService``: which bundle a topic is in, who owns it, and moving bundles.

A LOOKUP for a bundle nobody owns makes the least loaded live broker its owner (ties: the
bundle's hash picks, so that assignments spread without a leader); the owner serves PRODUCER and
SUBSCRIBE, every other broker answers them ServiceNotReady so that the client looks up again.
An unload drops the ownership and closes the bundle's topics here (their clients look up and
reconnect); a split cuts the bundle in two halves that stay with its owner, as Pulsar's
``splitAndOwnBundle`` does, so that no client is disturbed.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Mapping

from magnetar.broker.bundles import NamespaceBundle, NamespaceBundles
from magnetar.broker.errors import BrokerError
from magnetar.broker.namespaces import NamespaceRegistry
from magnetar.broker.ownership import SPREAD_CHANGE, BrokerInfo, OwnershipStore
from magnetar.protocol import wire
from magnetar.protocol.topic_name import TopicName

#: The change published when bundles lose their owner (``bundle/tenant/ns/range``, or ``bundles``
#: for a broker's whole share): the brokers look again at what they should serve.
BUNDLE_PATH = "bundle"


class ServiceUnitNotReady(BrokerError):
    """Pulsar's ServiceUnitNotReadyException: this broker does not serve the topic's bundle."""

    code = wire.ServiceNotReady


def not_served_message(topic: TopicName, broker: str) -> str:
    """Pulsar's words (ServerCnx, BrokerService.checkTopicNsOwnership), which clients log."""
    return (
        f"Namespace bundle for topic ({topic}) not served by this instance:{broker}."
        f" Please redo the lookup. Request is denied: namespace={topic.namespace_name}"
    )


def choose_owner(counts: Mapping[str, int], bundle: str) -> str:
    """The broker a new bundle goes to: fewest bundles owned; among those, one picked by the
    bundle's hash (so that brokers starting together do not all pick the first)."""
    if not counts:
        raise LookupError("no broker is live")
    fewest = min(counts.values())
    candidates = sorted(broker for broker, count in counts.items() if count == fewest)
    return candidates[zlib.crc32(bundle.encode()) % len(candidates)]


class NamespaceService:
    """Bundles and their owners as this broker sees them; ``unload_topics`` closes the topics of
    a bundle loaded here (and their producers and consumers) at once and says how many there
    were; ``close_topics`` does the same with their storage closed off the loop (an unload of a
    bundle of thousands of topics: their fsyncs and commits), done when every close is."""

    def __init__(
        self,
        namespaces: NamespaceRegistry,
        store: OwnershipStore,
        unload_topics: Callable[[NamespaceBundle], int],
        close_topics: Callable[[NamespaceBundle], Awaitable[int]] | None = None,
    ) -> None:
        self.namespaces = namespaces
        self.store = store
        self._unload_topics = unload_topics
        self._close_topics = close_topics
        #: Bundles whose unload is under way here: their topics are not loaded again meanwhile.
        self._unloading: set[str] = set()
        self.me: BrokerInfo | None = None
        self._bundles: dict[str, tuple[object, NamespaceBundles]] = {}
        #: The last change of the shared metadata this broker has applied (poll_changes).
        self._version = store.changes_since(0)[0]

    def register(self, me: BrokerInfo) -> None:
        """Join the brokers (once this broker's ports are bound and its URLs known)."""
        self.me = me
        self.store.register(me)

    def unregister(self) -> None:
        if self.me is not None:
            self.store.unregister(self.me.broker_id)

    def topic_loaded(self, topic: str, loaded: bool) -> None:
        """A non-persistent ``topic`` was loaded here (or left): the other brokers list it too."""
        if self.me is not None:
            self.store.topic_loaded(self.me.broker_id, topic, loaded)

    def nonpersistent_topics(self, namespace: str) -> list[str]:
        """The non-persistent topics of ``namespace`` that the live brokers have loaded."""
        return self.store.loaded_topics(f"non-persistent://{namespace}/")

    @property
    def broker_id(self) -> str:
        if self.me is None:
            raise RuntimeError("the broker is not registered")
        return self.me.broker_id

    # -- bundles ------------------------------------------------------------------------------------
    def bundles(self, namespace: str) -> NamespaceBundles:
        """The namespace's bundles, read again only when its policies were (a LOOKUP asks)."""
        data = self.namespaces.policies(namespace).bundles
        cached = self._bundles.get(namespace)
        if cached is None or cached[0] is not data:
            cached = self._bundles[namespace] = (data, self.namespaces.bundles(namespace))
        return cached[1]

    def bundle_of(self, topic: TopicName) -> NamespaceBundle:
        """The bundle of ``topic`` (NamespaceNotFound if its namespace does not exist)."""
        return self.bundles(topic.namespace_name).find_bundle(str(topic))

    def bundle(self, namespace: str, bundle_range: str) -> NamespaceBundle:
        """The namespace's bundle named ``bundle_range`` (InvalidBundle if it is not one of them)."""
        bundle = NamespaceBundle.parse(namespace, bundle_range)
        self.bundles(namespace).validate(bundle)
        return bundle

    # -- owners -------------------------------------------------------------------------------------
    def owner_of(self, bundle: NamespaceBundle) -> BrokerInfo:
        """The bundle's owner, made the least loaded broker if it has none."""
        name = str(bundle)
        owner = self.store.owner(name)
        if owner is not None:
            return owner
        return self.store.assign(name, choose_owner(self.store.bundle_counts(), name))

    def lookup(self, topic: TopicName) -> BrokerInfo:
        """The broker that serves ``topic`` (LOOKUP, HTTP lookup, admin redirects)."""
        return self.owner_of(self.bundle_of(topic))

    def check_served_here(self, topic: TopicName) -> None:
        """Raise ServiceUnitNotReady unless this broker owns ``topic``'s bundle (made its owner
        if the bundle has none and this broker is its choice)."""
        bundle = self.bundle_of(topic)
        owner = self.owner_of(bundle)
        if owner.broker_id != self.broker_id or str(bundle) in self._unloading:
            raise ServiceUnitNotReady(not_served_message(topic, self.broker_id))

    def is_served_here(self, topic: TopicName) -> bool:
        return self.lookup(topic).broker_id == self.broker_id

    # -- moving bundles ----------------------------------------------------------------------------
    async def unload(self, bundle: NamespaceBundle) -> int:
        """Close ``bundle``'s topics here, then drop this broker's ownership of it; the topics
        closed. In that order: the next owner never opens files this broker still has open. The
        closes run off the loop (``close_topics``); meanwhile the bundle is still owned here but
        serves nobody (``check_served_here`` refuses its topics: the clients look up again)."""
        name = str(bundle)
        self._unloading.add(name)
        try:
            if self._close_topics is not None:
                closed = await self._close_topics(bundle)
            else:
                closed = self._unload_topics(bundle)
            self.store.release(name, self.broker_id)
        finally:
            self._unloading.discard(name)
        self.store.publish_change(f"{BUNDLE_PATH}{bundle}")  # its next owner resumes its replication
        return closed

    def split(self, bundle: NamespaceBundle) -> tuple[NamespaceBundle, ...]:
        """Cut ``bundle`` in two (range_equally_divide); the halves stay with its owner."""
        namespace = bundle.namespace
        split, halves = self.bundles(namespace).split(bundle)
        owner = self.store.owner(str(bundle))
        self.namespaces.set_bundles(namespace, split)
        self.store.release(str(bundle), owner.broker_id if owner is not None else self.broker_id)
        if owner is not None:
            for half in halves:
                self.store.assign(str(half), owner.broker_id)
        return halves

    # -- the session and the shared metadata (run in the background when the store is shared) ------
    def keep_alive(self) -> None:
        """Renew this broker's session. One that ran out (the broker stalled past its lease) owns
        nothing any more: its topics are closed, so that clients go to the bundles' new owners,
        and it joins again."""
        if self.me is None or self.store.renew(self.me.broker_id):
            return
        self._unload_all()
        self.store.register(self.me)
        self.store.publish_change(f"{BUNDLE_PATH}s")  # the bundles it had are anyone's now

    def _unload_all(self) -> None:
        for tenant in self.namespaces.tenants():
            for namespace in self.namespaces.namespaces(tenant):
                for bundle in self.bundles(namespace).bundles:
                    self._unload_topics(bundle)

    def poll_changes(
        self,
        changed: Callable[[str], None],
        schema_changed: Callable[[str | None], None] = lambda sid: None,
        bundles_moved: Callable[[], None] = lambda: None,
        spread_changed: Callable[[], None] = lambda: None,
        other: Callable[[str], None] = lambda path: None,
    ) -> None:
        """Apply the namespaces other brokers changed: their cached policies are dropped and
        ``changed(namespace)`` is called (``"*"``: every namespace may have changed); a topic's
        schema changed: ``schema_changed(its schema id)`` (None: any); bundles lost their owner
        (an unload, a broker gone): ``bundles_moved()``, once; a topic was made spread:
        ``spread_changed()``; any other path: ``other(path)``."""
        self._version, paths = self.store.changes_since(self._version)
        for path in dict.fromkeys(paths):
            if path.startswith("schema/"):
                schema_changed(path.removeprefix("schema/"))
            elif path == SPREAD_CHANGE:
                spread_changed()
            elif path == "*":
                self.namespaces.forget()
                schema_changed(None)
                spread_changed()
                changed("*")
            elif path.startswith("namespace/"):
                namespace = path.removeprefix("namespace/")
                self.namespaces.forget(namespace)
                changed(namespace)
            elif not path.startswith(BUNDLE_PATH):
                other(path)
        if any(path.startswith(BUNDLE_PATH) or path == "*" for path in paths):
            bundles_moved()
