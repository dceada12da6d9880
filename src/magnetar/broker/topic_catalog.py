"""Which topics there are: namespaces' auto-creation, may a topic be loaded or created, topic
counts against max_topics_per_namespace, partitioned topics' metadata, creating and deleting
topics, and the topics of a namespace."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.errors import NotAllowed, TopicNotFound
from magnetar.broker.namespaces import AlreadyExists, AutoTopicCreation, NotEmpty
from magnetar.protocol.topic_name import TopicName, partition_name

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


class TopicCatalog:
    """Reads the service's public ``topics``, ``storage``, ``namespaces``, ``config`` and ``limits``."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    def check_namespace(self, name: TopicName) -> None:
        self._service.namespaces.policies(name.namespace_name)  # raises NamespaceNotFound

    def auto_topic_creation(self, namespace: str) -> AutoTopicCreation:
        config = self._service.config
        policy = self._service.namespaces.policies(namespace).auto_topic_creation
        if policy is not None:
            return AutoTopicCreation.from_json(policy)
        return AutoTopicCreation(
            allow_auto_topic_creation=config.allow_auto_topic_creation,
            topic_type=config.auto_topic_creation_type,
            default_num_partitions=config.default_num_partitions,
        )

    def exists(self, key: str) -> bool:
        return key in self._service.topics or self._service.storage.has_managed_ledger(key)

    def check_creatable(self, name: TopicName, create: bool) -> None:
        """Raise why the persistent topic ``name`` may not be loaded (or created) now."""
        key = str(name)
        if self.exists(key):
            return
        namespaces = self._service.namespaces
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
        service = self._service
        return service.limits.topics_limited(service.namespaces.policies(namespace).max_topics_per_namespace)

    def check_topic_count(self, namespace: str, new: int) -> None:
        """Raise LimitReached when ``new`` more persistent topics (partitions each count) would put
        ``namespace`` past its max_topics_per_namespace. Counted as Pulsar does: the persistent
        topics stored, and every partition of its partitioned topics."""
        service = self._service
        namespace_max = service.namespaces.policies(namespace).max_topics_per_namespace
        if not service.limits.topics_limited(namespace_max):
            return
        prefix = f"persistent://{namespace}/"
        names = {n for n in service.storage.managed_ledger_names() if n.startswith(prefix)}
        for base in service.namespaces.partitioned_topics(namespace, "persistent"):
            names.update(partition_name(base, i) for i in range(service.namespaces.partitions(base)))
        service.limits.check_topics(namespace, len(names), new, namespace_max)

    # -- partitioned topics -----------------------------------------------------------------
    def partitions_of(self, name: TopicName, auto_create: bool = True) -> int:
        """Partition count of a partitioned topic; 0 for a plain topic.

        As in Pulsar, asking about a topic that does not exist creates it as partitioned
        when the namespace's auto-creation says so.
        """
        self.check_namespace(name)
        namespaces = self._service.namespaces
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
        namespaces = self._service.namespaces
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
        namespaces = self._service.namespaces
        current = namespaces.partitions(str(name))
        if not current:
            raise TopicNotFound(f"Partitioned topic {name} does not exist")
        if count < current:
            raise NotAllowed(f"the number of partitions can only grow (now {current})")
        if name.persistent and count > current:
            self.check_topic_count(name.namespace_name, count - current)
        namespaces.set_partitions(str(name), count)

    def delete_partitioned_topic(self, name: TopicName) -> None:
        namespaces = self._service.namespaces
        count = namespaces.partitions(str(name))
        if not count:
            raise TopicNotFound(f"Partitioned topic {name} does not exist")
        for i in range(count):
            partition = name.partition(i)
            if self.exists(str(partition)):
                self.delete_topic(partition)
        namespaces.delete_partitions(str(name))
        self._forget_replication(name)

    # -- topics -----------------------------------------------------------------------------
    def create_topic(self, name: TopicName) -> None:
        self.check_namespace(name)
        key = str(name)
        if self.exists(key) or self._service.namespaces.partitions(key):
            raise AlreadyExists(f"Topic {key} already exists")
        self._service.get_topic(name, create=True)

    def delete_topic(self, name: TopicName) -> None:
        service = self._service
        key = str(name)
        if not self.exists(key):
            raise TopicNotFound(f"Topic {key} does not exist")
        topic = service.topics.get(key)
        if topic is not None:
            if topic.producers or any(s.consumers for s in topic.subscriptions.values()):
                raise NotEmpty(f"Topic {key} has connected producers or consumers")
            topic.close()
            del service.topics[key]
            service.replication_changed()  # its replicators stop
            if topic.ml is None:
                return
        service.storage.delete_managed_ledger(key)
        if name.partitioned_base() is None:
            self._forget_replication(name)

    def _forget_replication(self, name: TopicName) -> None:
        """A deleted topic's replication-clusters override goes with it (Pulsar's topic policies do)."""
        if self._service.topic_replication is not None:
            self._service.topic_replication.remove(name)

    def topics_of_namespace(self, namespace: str) -> list[str]:
        """Every topic (partitions included) stored or loaded in ``namespace``."""
        service = self._service
        names = set(service.storage.managed_ledger_names()) | set(service.topics)
        out = []
        for key in names:
            try:
                if TopicName.parse(key).namespace_name == namespace:
                    out.append(key)
            except ValueError:
                continue
        return sorted(out)

    def topic_list(self, namespace: str, mode: int = 0) -> list[str]:
        """Topics of a namespace for GET_TOPICS_OF_NAMESPACE: stored ones and every partition
        of its partitioned topics. ``mode``: 0 persistent, 1 non-persistent, 2 all."""
        namespaces = self._service.namespaces
        namespaces.policies(namespace)
        names = set(self.topics_of_namespace(namespace))
        for domain in ("persistent", "non-persistent"):
            for base in namespaces.partitioned_topics(namespace, domain):
                names.update(partition_name(base, i) for i in range(namespaces.partitions(base)))
        wanted = {0: ("persistent://",), 1: ("non-persistent://",), 2: ("persistent://", "non-persistent://")}
        prefixes = wanted.get(mode, ("persistent://",))
        return sorted(n for n in names if n.startswith(prefixes))
