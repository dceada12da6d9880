"""Which topics there are: namespaces' auto-creation, may a topic be loaded or created, topic
counts against max_topics_per_namespace, partitioned topics' metadata, deleting topics, and the
topics of a namespace."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from magnetar.broker.bundles import NamespaceBundle, topic_hash
from magnetar.broker.errors import NotAllowed, TopicNotFound
from magnetar.broker.namespaces import AlreadyExists, AutoTopicCreation, NotEmpty
from magnetar.protocol.topic_name import TopicName, partition_name

if TYPE_CHECKING:
    from magnetar.broker.limits import Limits
    from magnetar.broker.nonpersistent import NonPersistentSubscription, NonPersistentTopic
    from magnetar.broker.resources import BrokerResources
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic import PersistentTopic

#: The topics loaded, by name (the broker's ``topics``).
Topics = dict[str, "PersistentTopic | NonPersistentTopic"]


class TopicCatalog:
    """Answers from the loaded ``topics`` and the stored ``resources`` (storage, namespaces,
    replication overrides); ``auto_creation`` is the broker's setting where a namespace has
    none, and ``topics_changed`` is called when a loaded topic is deleted (its replicators stop)."""

    def __init__(
        self,
        topics: Topics,
        resources: BrokerResources,
        limits: Limits,
        auto_creation: AutoTopicCreation,
        topics_changed: Callable[[], None],
        nonpersistent_loaded: Callable[[str, bool], None] = lambda key, loaded: None,
    ) -> None:
        self._topics = topics
        self._storage = resources.storage
        self._namespaces = resources.namespaces
        self._topic_replication = resources.topic_replication
        self._topic_inactive_policies = resources.topic_inactive_policies
        self._topic_compaction_thresholds = resources.topic_compaction_thresholds
        self._limits = limits
        self._auto_creation = auto_creation
        self._topics_changed = topics_changed
        #: Told of each non-persistent topic that leaves the loaded topics (it no longer exists).
        self._nonpersistent_loaded = nonpersistent_loaded

    def check_namespace(self, name: TopicName) -> None:
        self._namespaces.policies(name.namespace_name)  # raises NamespaceNotFound

    def auto_topic_creation(self, namespace: str) -> AutoTopicCreation:
        policy = self._namespaces.policies(namespace).auto_topic_creation
        if policy is not None:
            return AutoTopicCreation.from_json(policy)
        return dataclasses.replace(self._auto_creation)

    def exists(self, key: str) -> bool:
        return key in self._topics or self._storage.has_managed_ledger(key)

    def check_creatable(self, name: TopicName, create: bool) -> None:
        """Raise why the persistent topic ``name`` may not be loaded (or created) now."""
        key = str(name)
        if self.exists(key):
            return
        namespaces = self._namespaces
        base = name.partitioned_base()
        partition_of_known = base is not None and 0 <= name.partition_index < namespaces.partitions(str(base))
        allowed = create and self.auto_topic_creation(name.namespace_name).allow_auto_topic_creation
        if not (partition_of_known or allowed):
            raise TopicNotFound(f"Topic {key} does not exist")
        if namespaces.partitions(key):
            raise NotAllowed(f"Topic {key} is partitioned: use its partitions")
        if not partition_of_known:
            self.check_topic_count(name.namespace_name, 1)

    def topics_limited(self, namespace: str) -> bool:
        return self._limits.topics_limited(self._namespaces.policies(namespace).max_topics_per_namespace)

    def check_topic_count(self, namespace: str, new: int) -> None:
        """Raise LimitReached when ``new`` more persistent topics (partitions each count) would put
        ``namespace`` past its max_topics_per_namespace. Counted as Pulsar does: the persistent
        topics stored, and every partition of its partitioned topics."""
        namespace_max = self._namespaces.policies(namespace).max_topics_per_namespace
        if not self._limits.topics_limited(namespace_max):
            return
        storage = self._storage
        existing = storage.count_managed_ledgers(f"persistent://{namespace}/")
        for base in self._namespaces.partitioned_topics(namespace, "persistent"):
            partitions = (partition_name(base, i) for i in range(self._namespaces.partitions(base)))
            existing += sum(1 for p in partitions if not storage.has_managed_ledger(p))
        self._limits.check_topics(namespace, existing, new, namespace_max)

    # -- partitioned topics -----------------------------------------------------------------
    def partitions_of(self, name: TopicName, auto_create: bool = True) -> int:
        """Partition count of a partitioned topic; 0 for a plain topic.

        As in Pulsar, asking about a topic that does not exist creates it as partitioned
        when the namespace's auto-creation says so.
        """
        self.check_namespace(name)
        namespaces = self._namespaces
        key = str(name)
        count = namespaces.partitions(key)
        if count or not auto_create or name.partition_index >= 0 or self.exists(key):
            return count
        policy = self.auto_topic_creation(name.namespace_name)
        if policy.allow_auto_topic_creation and policy.topic_type == "partitioned":
            if name.persistent:
                self.check_topic_count(name.namespace_name, policy.default_num_partitions)
            namespaces.set_partitions(key, policy.default_num_partitions)
            return policy.default_num_partitions
        return 0

    def create_partitioned_topic(self, name: TopicName, count: int) -> None:
        self.check_namespace(name)
        namespaces = self._namespaces
        key = str(name)
        if name.partition_index >= 0:
            raise NotAllowed(f"{key} is already a partition name")
        if namespaces.partitions(key):
            raise AlreadyExists(f"Partitioned topic {key} already exists")
        if self.exists(key):
            raise AlreadyExists(f"Topic {key} already exists as a non-partitioned topic")
        if name.persistent:
            self.check_topic_count(name.namespace_name, count)
        namespaces.set_partitions(key, count)

    def update_partitioned_topic(self, name: TopicName, count: int) -> None:
        namespaces = self._namespaces
        current = namespaces.partitions(str(name))
        if not current:
            raise TopicNotFound(f"Partitioned topic {name} does not exist")
        if count < current:
            raise NotAllowed(f"the number of partitions can only grow (now {current})")
        if name.persistent and count > current:
            self.check_topic_count(name.namespace_name, count - current)
        namespaces.set_partitions(str(name), count)

    def delete_partitioned_topic(self, name: TopicName) -> None:
        namespaces = self._namespaces
        count = namespaces.partitions(str(name))
        if not count:
            raise TopicNotFound(f"Partitioned topic {name} does not exist")
        for i in range(count):
            partition = name.partition(i)
            if self.exists(str(partition)):
                self.delete_topic(partition)
        namespaces.delete_partitions(str(name))
        self._forget_policies(name)

    # -- topics -----------------------------------------------------------------------------
    def check_new_topic(self, name: TopicName) -> None:
        """Raise why ``name`` cannot be created (the admin API's create): it exists already."""
        self.check_namespace(name)
        key = str(name)
        if self.exists(key) or self._namespaces.partitions(key):
            raise AlreadyExists(f"Topic {key} already exists")

    def delete_topic(self, name: TopicName, changed: bool = True) -> None:
        """Delete a topic without producers or consumers (NotEmpty otherwise): closed if loaded,
        then its storage, its replication override and its inactive-topic policies; ``changed``:
        tell geo-replication now (else the caller does, once for many)."""
        key = str(name)
        if not self.exists(key):
            raise TopicNotFound(f"Topic {key} does not exist")
        topic = self._topics.get(key)
        if topic is not None:
            if topic.producers or any(s.consumers for s in topic.subscriptions.values()):
                raise NotEmpty(f"Topic {key} has connected producers or consumers")
            topic.close()
            del self._topics[key]
            if topic.ml is None:
                self._nonpersistent_loaded(key, False)
            if changed:
                self._topics_changed()  # its replicators stop
            if topic.ml is None:
                return
        self._storage.delete_managed_ledger(key)
        if name.partitioned_base() is None:
            self._forget_policies(name)
            self._topic_inactive_policies.remove(name)

    def unload_bundle(self, bundle: NamespaceBundle) -> int:
        """Close the loaded topics of ``bundle`` (Pulsar's bundle unload, ``unload_topic``), their
        storage at once (cursors flushed, files synced): the next owner never opens files still
        open here. The topics closed."""
        doomed = self.bundle_topics(bundle)
        for topic in doomed:
            self.unload_topic(topic)
            topic.close_storage()
        if doomed:
            self._topics_changed()  # their replicators stop
        return len(doomed)

    def bundle_topics(self, bundle: NamespaceBundle) -> list[PersistentTopic | NonPersistentTopic]:
        """The topics of ``bundle`` loaded now."""
        return [
            topic
            for key, topic in self._topics.items()
            if topic.name.namespace_name == bundle.namespace and bundle.includes(topic_hash(key))
        ]

    def unload_topic(self, topic: PersistentTopic | NonPersistentTopic) -> None:
        """Let a loaded topic go (a bundle's unload, an idle topic's): its producers get
        CLOSE_PRODUCER and its consumers CLOSE_CONSUMER, so the clients look the topic up again
        and reconnect (to the new owner, or here, where it loads again); its subscriptions close
        and it leaves the loaded topics. What a producer had no receipt for it sends again.
        The caller then closes its storage (``close_storage``: at once, or on an open thread) and
        calls ``topics_changed`` once for all the topics it unloaded (their replicators stop)."""
        for producer in list(topic.producers.values()):
            producer.close_by_broker()
        subscriptions: list[PersistentSubscription | NonPersistentSubscription] = list(
            topic.subscriptions.values()
        )
        for subscription in subscriptions:
            for consumer in list(subscription.consumers):
                consumer.disconnect()
        topic.detach()
        del self._topics[str(topic.name)]
        if topic.ml is None:
            self._nonpersistent_loaded(str(topic.name), False)

    def topics_changed(self) -> None:
        """Loaded topics went (or came): geo-replication is told."""
        self._topics_changed()

    def _forget_policies(self, name: TopicName) -> None:
        """A deleted topic's replication-clusters override and compaction threshold go with it
        (Pulsar's topic policies do)."""
        self._topic_replication.remove(name)
        self._topic_compaction_thresholds.remove(name)

    def topics_of_namespace(self, namespace: str, loaded: Iterable[str] | None = None) -> list[str]:
        """Every topic (partitions included) stored or loaded in ``namespace``, sorted. The stored
        ones are a range of the metadata's index, not every name; ``loaded``: the loaded topics'
        names, taken on the loop for a call on another thread (``BrokerService.listing_topics``)."""
        prefixes = (f"persistent://{namespace}/", f"non-persistent://{namespace}/")
        names = set(self._storage.managed_ledger_names(prefixes[0]))
        names.update(k for k in (self._topics if loaded is None else loaded) if k.startswith(prefixes))
        return sorted(k for k in names if _in_namespace(k, namespace, prefixes))

    def topic_list(self, namespace: str, mode: int = 0, loaded: Iterable[str] | None = None) -> list[str]:
        """Topics of a namespace for GET_TOPICS_OF_NAMESPACE: stored ones and every partition
        of its partitioned topics. ``mode``: 0 persistent, 1 non-persistent, 2 all; ``loaded`` as
        for ``topics_of_namespace``."""
        namespaces = self._namespaces
        namespaces.policies(namespace)
        names = set(self.topics_of_namespace(namespace, loaded))
        for domain in ("persistent", "non-persistent"):
            for base in namespaces.partitioned_topics(namespace, domain):
                names.update(partition_name(base, i) for i in range(namespaces.partitions(base)))
        wanted = {0: ("persistent://",), 1: ("non-persistent://",), 2: ("persistent://", "non-persistent://")}
        prefixes = wanted.get(mode, ("persistent://",))
        return sorted(n for n in names if n.startswith(prefixes))


def _in_namespace(key: str, namespace: str, prefixes: tuple[str, str]) -> bool:
    """Whether ``key``, starting with one of ``prefixes``, names a topic of ``namespace``: a local
    name without a slash does (the usual case, no parsing); otherwise its parsed namespace decides."""
    rest = key.removeprefix(prefixes[0]) if key.startswith(prefixes[0]) else key.removeprefix(prefixes[1])
    if "/" not in rest:
        return True
    try:
        return TopicName.parse(key).namespace_name == namespace
    except ValueError:
        return False
