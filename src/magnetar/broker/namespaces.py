"""Tenants, namespaces, their policies and partitioned-topic metadata, kept in the metadata store.

Pulsar's model: a topic lives in ``tenant/namespace``; policies are set per namespace and
override the broker's settings; a partitioned topic is metadata (its partition count) over
ordinary topics named ``<topic>-partition-<n>``. ``public/default`` exists from the start.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from magnetar.broker.authorization import AuthPolicies
from magnetar.broker.bundles import DEFAULT_NUMBER_OF_BUNDLES, NamespaceBundles
from magnetar.broker.errors import BrokerError, TopicNotFound
from magnetar.protocol import wire


class NamespaceNotFound(TopicNotFound):
    pass


class AlreadyExists(BrokerError):
    code = wire.NotAllowedError


class NotEmpty(BrokerError):
    code = wire.NotAllowedError


@dataclass
class AutoTopicCreation:
    allow_auto_topic_creation: bool = True
    topic_type: str = "non-partitioned"  # or "partitioned"
    default_num_partitions: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "allowAutoTopicCreation": self.allow_auto_topic_creation,
            "topicType": self.topic_type,
            "defaultNumPartitions": self.default_num_partitions,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AutoTopicCreation:
        topic_type = data.get("topicType", "non-partitioned")
        if topic_type not in ("partitioned", "non-partitioned"):
            raise ValueError("topicType must be 'partitioned' or 'non-partitioned'")
        partitions = int(data.get("defaultNumPartitions", 1))
        if topic_type == "partitioned" and partitions < 1:
            raise ValueError("defaultNumPartitions must be at least 1")
        return cls(bool(data.get("allowAutoTopicCreation", True)), topic_type, partitions)


@dataclass
class NamespacePolicies:
    """Per-namespace settings; None means "use the broker's setting"."""

    deduplication_enabled: bool | None = None
    message_ttl_seconds: int | None = None
    retention_time_minutes: int | None = None
    retention_size_mb: int | None = None
    schema_compatibility_strategy: str | None = None
    auto_topic_creation: dict[str, Any] | None = None
    #: Backlog quotas by kind, in Pulsar's JSON (``backlog_quota.py``).
    backlog_quota_map: dict[str, dict[str, Any]] | None = None
    #: Pulsar's namespace limits (broker/limits.py); 0 here: no limit, whatever the broker's.
    max_producers_per_topic: int | None = None
    max_consumers_per_topic: int | None = None
    max_consumers_per_subscription: int | None = None
    max_topics_per_namespace: int | None = None
    #: Grants to roles, Pulsar's ``auth_policies`` JSON (authorization.AuthPolicies); None: none.
    auth_policies: dict[str, Any] | None = None
    #: Clusters the namespace replicates to (Pulsar's name); None: the local cluster only.
    replication_clusters: list[str] | None = None
    #: The namespace's bundles, Pulsar's BundlesData JSON (``boundaries``, ``numBundles``); set
    #: when the namespace is made, changed by a split (bundles.py).
    bundles: dict[str, Any] | None = None
    #: Pulsar's InactiveTopicPolicies JSON (inactive_topic_policies.py); None: the broker's settings.
    inactive_topic_policies: dict[str, Any] | None = None
    #: Tiered storage (offload_policies.py): Pulsar's ``offload_threshold`` (bytes kept locally;
    #: -1 off, 0 at once), ``offload_threshold_in_seconds`` (seconds after its close a ledger is
    #: offloaded; -1 off), ``offload_deletion_lag_ms`` and ``offload_policies`` (OffloadPolicies
    #: JSON); None: the broker's settings.
    offload_threshold: int | None = None
    offload_threshold_in_seconds: int | None = None
    offload_deletion_lag_ms: int | None = None
    offload_policies: dict[str, Any] | None = None

    #: Pulsar's compaction_threshold: bytes of a topic's backlog not compacted yet past which it is
    #: compacted by itself (compaction_policies.py); 0: never; None: the broker's setting.
    compaction_threshold: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NamespacePolicies:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


class NamespaceRegistry:
    """Durable tenants, namespaces, policies and partition counts (in the storage's key/value store)."""

    def __init__(
        self, metadata, local_cluster: str = "standalone", default_bundles: int = DEFAULT_NUMBER_OF_BUNDLES
    ) -> None:
        self._kv = metadata
        self._cache: dict[str, NamespacePolicies] = {}
        self.default_bundles = default_bundles
        #: Called with ``namespace/<tenant>/<ns>`` after each change of a namespace's policies:
        #: other brokers sharing the store hear of it (ownership.OwnershipStore.publish_change).
        self.changed: Callable[[str], None] = lambda path: None
        if self._kv.get("tenant/public") is None:
            self._kv.put("tenant/public", json.dumps({"adminRoles": [], "allowedClusters": [local_cluster]}))
        if self._kv.get("namespace/public/default") is None:
            self.create_namespace("public/default")

    # -- tenants ----------------------------------------------------------------------------
    def tenants(self) -> list[str]:
        return sorted(k.removeprefix("tenant/") for k in self._kv.keys("tenant/"))

    def tenant(self, name: str) -> dict[str, Any]:
        raw = self._kv.get(f"tenant/{name}")
        if raw is None:
            raise TopicNotFound(f"Tenant {name} does not exist")
        return json.loads(raw)

    def create_tenant(self, name: str, info: dict[str, Any]) -> None:
        if self._kv.get(f"tenant/{name}") is not None:
            raise AlreadyExists(f"Tenant {name} already exists")
        self._kv.put(f"tenant/{name}", json.dumps(info))

    def update_tenant(self, name: str, info: dict[str, Any]) -> None:
        self.tenant(name)
        self._kv.put(f"tenant/{name}", json.dumps(info))

    def delete_tenant(self, name: str) -> None:
        self.tenant(name)
        if self.namespaces(name):
            raise NotEmpty(f"Tenant {name} still has namespaces")
        self._kv.delete(f"tenant/{name}")

    # -- namespaces ---------------------------------------------------------------------------
    def namespaces(self, tenant: str) -> list[str]:
        return sorted(k.removeprefix("namespace/") for k in self._kv.keys(f"namespace/{tenant}/"))

    def exists(self, namespace: str) -> bool:
        return self._kv.get(f"namespace/{namespace}") is not None

    def create_namespace(self, namespace: str, policies: NamespacePolicies | None = None) -> None:
        tenant = namespace.split("/")[0]
        self.tenant(tenant)
        if self.exists(namespace):
            raise AlreadyExists(f"Namespace {namespace} already exists")
        policies = policies or NamespacePolicies()
        # As Pulsar: the bundles are fixed when the namespace is made (the broker's default count
        # unless the request names them), so a later change of the default moves no topic.
        if policies.bundles is None:
            bundles = NamespaceBundles.even(namespace, self.default_bundles)
        else:  # InvalidBundle (a ValueError: 400 on the admin API) if they do not add up
            bundles = NamespaceBundles.from_json(namespace, policies.bundles)
        policies.bundles = bundles.to_json()
        self._kv.put(f"namespace/{namespace}", json.dumps(policies.to_json()))

    def delete_namespace(self, namespace: str, topics: list[str]) -> None:
        self.policies(namespace)
        if topics:
            raise NotEmpty(f"Namespace {namespace} still has topics")
        self._kv.delete(f"namespace/{namespace}")
        self._cache.pop(namespace, None)
        self.changed(f"namespace/{namespace}")

    def forget(self, namespace: str | None = None) -> None:
        """Drop the cached policies of ``namespace`` (all if None): another broker changed them."""
        if namespace is None:
            self._cache.clear()
        else:
            self._cache.pop(namespace, None)

    def policies(self, namespace: str) -> NamespacePolicies:
        """The namespace's policies; cached, as every change goes through this registry."""
        cached = self._cache.get(namespace)
        if cached is not None:
            return cached
        raw = self._kv.get(f"namespace/{namespace}")
        if raw is None:
            raise NamespaceNotFound(f"Namespace {namespace} does not exist")
        policies = self._cache[namespace] = NamespacePolicies.from_json(json.loads(raw))
        return policies

    def set_policies(self, namespace: str, policies: NamespacePolicies) -> None:
        self.policies(namespace)
        self._kv.put(f"namespace/{namespace}", json.dumps(policies.to_json()))
        self._cache[namespace] = policies
        self.changed(f"namespace/{namespace}")

    def update_policy(self, namespace: str, **changes: Any) -> NamespacePolicies:
        policies = NamespacePolicies.from_json(self.policies(namespace).to_json())  # a copy
        for key, value in changes.items():
            setattr(policies, key, value)
        self.set_policies(namespace, policies)
        return policies

    def bundles(self, namespace: str) -> NamespaceBundles:
        """The namespace's bundles (the broker's default count for one stored without any)."""
        data = self.policies(namespace).bundles
        if data is None:
            return NamespaceBundles.even(namespace, self.default_bundles)
        return NamespaceBundles.from_json(namespace, data)

    def set_bundles(self, namespace: str, bundles: NamespaceBundles) -> None:
        self.update_policy(namespace, bundles=bundles.to_json())

    def replication_users(self, cluster: str) -> list[str]:
        """The namespaces whose replication clusters name ``cluster``."""
        return [
            ns
            for tenant in self.tenants()
            for ns in self.namespaces(tenant)
            if cluster in (self.policies(ns).replication_clusters or ())
        ]

    # -- grants (authorization.py) -------------------------------------------------------------
    def auth_policies(self, namespace: str) -> AuthPolicies:
        return AuthPolicies.from_json(self.policies(namespace).auth_policies)

    def set_auth_policies(self, namespace: str, grants: AuthPolicies) -> None:
        self.update_policy(namespace, auth_policies=grants.to_json())

    # -- partitioned topics -----------------------------------------------------------------
    def partitions(self, topic: str) -> int:
        """Partition count of a partitioned topic, 0 for none."""
        raw = self._kv.get(f"partitioned/{topic}")
        return int(raw) if raw is not None else 0

    def set_partitions(self, topic: str, count: int) -> None:
        self._kv.put(f"partitioned/{topic}", str(count))

    def delete_partitions(self, topic: str) -> None:
        self._kv.delete(f"partitioned/{topic}")

    def partitioned_topics(self, namespace: str, domain: str = "persistent") -> list[str]:
        prefix = f"partitioned/{domain}://{namespace}/"
        return sorted(k.removeprefix("partitioned/") for k in self._kv.keys(prefix))
