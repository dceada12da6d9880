"""Loading topics: a persistent topic's managed ledger opened on the loop (``get``) or, for the
commands that can wait, on a few open threads (``preparing``) so the loop serves everyone else
meanwhile; a durable subscription is created the same way. Unloading an idle topic (``unload``)
closes its storage on those threads too, and a load of it waits for that."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING

from magnetar.broker import descriptors
from magnetar.broker.errors import TopicNotFound
from magnetar.broker.nonpersistent import NonPersistentTopic
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.managed_ledger import ManagedLedger

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.namespaces import NamespacePolicies
    from magnetar.broker.resources import BrokerResources
    from magnetar.broker.startup import InterceptorFactory
    from magnetar.broker.topic_catalog import TopicCatalog, Topics

log = logging.getLogger(__name__)

#: Threads that open topics and create subscriptions (files, fsyncs, metadata commits) off the
#: loop. Their work is mostly waiting for the disk, so a few overlap it (and their metadata
#: writes share commits); more did not go faster on 2 cores (bench/topic_storm.py).
OPEN_THREADS = 4
#: Threads that close the storage of unloaded topics: apart from the open threads, so that an
#: unload of thousands of idle topics at once does not queue every open behind their closes
#: (clients timed out in bench/many_topics.py).
CLOSE_THREADS = 2


class TopicLoader:
    """Puts topics in ``topics`` once ``catalog`` allows them and ``check_owned`` (raises unless
    this broker owns the topic's bundle), over ``resources``' storage, each persistent one with
    its ``interceptors``; tells ``loaded`` of each (geo-replication opens its cursors)."""

    def __init__(
        self,
        topics: Topics,
        resources: BrokerResources,
        catalog: TopicCatalog,
        config: BrokerConfig,
        interceptors: Sequence[InterceptorFactory],
        loaded: Callable[[PersistentTopic], None],
        check_owned: Callable[[TopicName], None] = lambda name: None,
        nonpersistent_loaded: Callable[[str, bool], None] = lambda key, loaded: None,
    ) -> None:
        self._topics = topics
        self._storage = resources.storage
        self._namespaces = resources.namespaces
        self._catalog = catalog
        self._config = config
        self._interceptors = interceptors
        self._loaded = loaded
        #: Workers: only a bundle's owner may open its topics (two writers on one managed ledger
        #: would corrupt it); alone, a broker owns every bundle.
        self.check_owned = check_owned
        #: Told of each non-persistent topic loaded: it exists only here, and other workers list it.
        self._nonpersistent_loaded = nonpersistent_loaded
        #: Set once storage is closed: a topic whose open finishes after that is not added.
        self.storage_closed = False
        self.executor = ThreadPoolExecutor(OPEN_THREADS, thread_name_prefix="magnetar-open")
        self.closer = ThreadPoolExecutor(CLOSE_THREADS, thread_name_prefix="magnetar-close")
        #: Topics being opened on ``executor``: the future of their managed ledger.
        self._opening: dict[str, asyncio.Future] = {}
        #: New topics are counted and created one at a time where a namespace's topics are limited.
        self._topic_count_lock = threading.Lock()
        #: Each namespace's current policies, as its topics ask for them: one callable shared by
        #: the namespace's topics (a closure each cost 0.2 KiB per loaded topic, issue 40).
        self._policies_of: dict[str, Callable[[], NamespacePolicies]] = {}
        #: Topics unloaded whose storage is being closed on ``executor``: loading one waits.
        self._closing: dict[str, concurrent.futures.Future[None]] = {}

    def get(self, name: TopicName, create: bool = True) -> PersistentTopic | NonPersistentTopic:
        key = str(name)
        topic = self._topics.get(key)
        if topic is not None:
            return topic
        self.settle(key)
        catalog = self._catalog
        catalog.check_namespace(name)
        self.check_owned(name)
        if not name.persistent:
            if not (create and catalog.auto_topic_creation(name.namespace_name).allow_auto_topic_creation):
                raise TopicNotFound(f"Topic {key} does not exist")
            topic = self._topics[key] = NonPersistentTopic(name, self._config)
            self._nonpersistent_loaded(key, True)
            return topic
        catalog.check_creatable(name, create)
        return self._add_topic(name, self._open_managed_ledger(key))

    def preparing(
        self, name: TopicName, subscription: tuple[str, str] | None = None
    ) -> asyncio.Future | None:
        """Open the persistent topic ``name`` (and create its durable ``subscription``, a
        (name, initial position) pair) on the open threads; None when there is nothing to do.
        The checks run there too (they query the metadata store); a refusal fails the future
        with its BrokerError, and ``get`` says it again on the loop.

        Opening a topic and creating a subscription write files, fsync them and commit metadata:
        milliseconds each, which on the loop would hold up every other client (2,000 topics at
        once stalled unrelated producers for seconds). The caller answers its client when the
        future is done, so a topic or subscription is durable before a client hears it exists.
        """
        topic = self._topics.get(str(name))
        if topic is None:
            if not name.persistent:
                return None
        elif subscription is None or subscription[0] in topic.subscriptions or topic.ml is None:
            return None
        return asyncio.ensure_future(self._prepare(name, subscription))

    async def _prepare(self, name: TopicName, subscription: tuple[str, str] | None) -> None:
        key = str(name)
        topics = self._topics
        while (closing := self._closing.get(key)) is not None and key not in topics:
            await asyncio.wait([asyncio.wrap_future(closing)])  # an unload's close, then the load
            self._forget_closing(key, closing)
        if key not in topics:
            opening = self._opening.get(key)
            if opening is None:
                self.check_owned(name)
                loop = asyncio.get_running_loop()
                opening = loop.run_in_executor(self.executor, self._check_and_open, name)
                self._opening[key] = opening
                opening.add_done_callback(lambda done: self._opened(name, done))
            await asyncio.shield(opening)
        topic = topics.get(key)
        if subscription is not None and isinstance(topic, PersistentTopic):
            await topic.prepare_subscription(*subscription, executor=self.executor)

    def _check_and_open(self, name: TopicName) -> ManagedLedger:
        """On an open thread: may ``name`` be loaded (raises why not), then its managed ledger."""
        catalog = self._catalog
        catalog.check_namespace(name)
        if not catalog.topics_limited(name.namespace_name):
            catalog.check_creatable(name, True)
            return self._open_managed_ledger(str(name))
        with self._topic_count_lock:  # two new topics at once must not both take the last place
            catalog.check_creatable(name, True)
            return self._open_managed_ledger(str(name))

    def _open_managed_ledger(self, key: str) -> ManagedLedger:
        """The topic's managed ledger; PersistenceError when its files cannot be opened (the
        descriptors left are the reserve, EMFILE, another I/O error)."""
        try:
            descriptors.check_reserve("topic", key)
            return self._storage.open_managed_ledger(key)
        except OSError as exc:
            raise descriptors.storage_error("topic", key, exc) from None

    def _opened(self, name: TopicName, done: asyncio.Future[ManagedLedger]) -> None:
        key = str(name)
        del self._opening[key]
        if done.cancelled() or done.exception() is not None or self.storage_closed:
            return
        if key not in self._topics:
            self._add_topic(name, done.result())

    def unload(self, topic: PersistentTopic | NonPersistentTopic) -> asyncio.Future[None] | None:
        """Unload ``topic`` (``TopicCatalog.unload_topic``), its storage closed on a close thread
        (fsyncs and commits: an idle broker unloading thousands of topics must not stall the loop
        for them, nor the opens). The next use loads it again, once that close is done. The
        close's future (a failure is logged); None for a non-persistent topic, which has none."""
        self._catalog.unload_topic(topic)
        if topic.ml is None:
            return None
        key = str(topic.name)
        closing = self.closer.submit(topic.close_storage)
        self._closing[key] = closing
        closed = asyncio.wrap_future(closing)
        closed.add_done_callback(lambda done: self._closed(key, closing, done))
        return closed

    def _closed(self, key: str, closing: concurrent.futures.Future[None], done: asyncio.Future[None]) -> None:
        self._forget_closing(key, closing)
        if not done.cancelled() and (exc := done.exception()) is not None:
            log.error("unloading %s: closing its storage failed: %r", key, exc)

    def _forget_closing(self, key: str, closing: concurrent.futures.Future[None]) -> None:
        if self._closing.get(key) is closing:
            del self._closing[key]

    def after_closes(self, then: Callable[[], object]) -> None:
        """Run ``then`` on a close thread once the unloads' closes under way now are done."""
        under_way = list(self._closing.values())

        def run() -> None:
            concurrent.futures.wait(under_way)
            then()

        self.closer.submit(run)

    def settle(self, key: str) -> None:
        """Wait (blocking) until an unload of ``key`` has closed its storage: a load on the loop, or
        a delete, of a topic being unloaded (rare: an unloaded topic's next use is usually a
        PRODUCER or SUBSCRIBE, whose load awaits it in ``preparing``)."""
        closing = self._closing.get(key)
        if closing is not None:
            concurrent.futures.wait([closing])
            self._forget_closing(key, closing)

    def _add_topic(self, name: TopicName, ml: ManagedLedger) -> PersistentTopic:
        key = str(name)
        topic = self._topics.get(key)
        if isinstance(topic, PersistentTopic):
            return topic  # opened meanwhile by another path, on the same managed ledger
        namespace = name.namespace_name
        policies = self._policies_of.get(namespace)
        if policies is None:
            policies = self._policies_of[namespace] = partial(self._namespaces.policies, namespace)
        topic = PersistentTopic(name, ml, self._config, policies, self._interceptors)
        self._topics[key] = topic
        self._loaded(topic)
        return topic
