"""The broker's stored resources (Pulsar's ``PulsarResources``): the storage and the registries
kept in its metadata store, made together once storage is open (it needs the running loop), so
whoever holds them holds every one of them, never a half-started broker's ``None``."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.broker.clusters import ClusterRegistry
from magnetar.broker.compaction_policies import TopicCompactionThresholds
from magnetar.broker.inactive_topic_policies import TopicInactivePolicies
from magnetar.broker.namespaces import NamespaceRegistry
from magnetar.broker.offload_policies import TopicOffloadPolicies
from magnetar.broker.replication import TopicReplication
from magnetar.broker.schemas.registry import SchemaRegistry
from magnetar.storage.store import Storage


class BrokerNotStarted(RuntimeError):
    """A resource asked for before ``BrokerService.start`` opened storage."""


@dataclass(frozen=True)
class BrokerResources:
    storage: Storage
    #: Tenants, namespaces, their policies and partitioned topics' metadata.
    namespaces: NamespaceRegistry
    #: The clusters geo-replication knows (this one included).
    clusters: ClusterRegistry
    #: Topics' own replication-clusters overrides.
    topic_replication: TopicReplication
    schemas: SchemaRegistry
    #: Topics' own inactive-topic policies.
    topic_inactive_policies: TopicInactivePolicies
    #: Topics' own offload policies (tiered storage).
    topic_offload_policies: TopicOffloadPolicies

    #: Topics' own compaction thresholds.
    topic_compaction_thresholds: TopicCompactionThresholds

    @classmethod
    def open(cls, storage: Storage, cluster_name: str, default_bundles: int) -> BrokerResources:
        """The registries over ``storage``'s metadata store (``public/default`` made if new, cut
        into ``default_bundles``)."""
        metadata = storage.metadata
        namespaces = NamespaceRegistry(metadata, cluster_name, default_bundles)
        return cls(
            storage=storage,
            namespaces=namespaces,
            clusters=ClusterRegistry(metadata, cluster_name),
            topic_replication=TopicReplication(metadata),
            schemas=SchemaRegistry(metadata, namespaces),
            topic_inactive_policies=TopicInactivePolicies(metadata),
            topic_offload_policies=TopicOffloadPolicies(metadata),
            topic_compaction_thresholds=TopicCompactionThresholds(metadata),
        )
