"""Namespaces and their policies through the admin API (``admin.namespaces``, as the Java
PulsarAdmin's ``namespaces()``).

A policy that is not set answers None (the broker's setting applies); ``remove_*`` unsets it.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from magnetar.client.admin.paths import namespace_path, quote

if TYPE_CHECKING:
    from magnetar.client.admin.requests import AdminRequests

#: The policies of one value each, by the path the broker serves them at (namespaces_api.POLICIES).
MESSAGE_TTL = "messageTTL"
INACTIVE_TOPIC_POLICIES = "inactiveTopicPolicies"
DEDUPLICATION = "deduplication"
SCHEMA_COMPATIBILITY_STRATEGY = "schemaCompatibilityStrategy"
AUTO_TOPIC_CREATION = "autoTopicCreation"
MAX_PRODUCERS_PER_TOPIC = "maxProducersPerTopic"
MAX_CONSUMERS_PER_TOPIC = "maxConsumersPerTopic"
MAX_CONSUMERS_PER_SUBSCRIPTION = "maxConsumersPerSubscription"
MAX_TOPICS_PER_NAMESPACE = "maxTopicsPerNamespace"
COMPACTION_THRESHOLD = "compactionThreshold"

#: Backlog quota kinds and policies (Pulsar's names).
DESTINATION_STORAGE = "destination_storage"
MESSAGE_AGE = "message_age"
PRODUCER_REQUEST_HOLD = "producer_request_hold"


class Namespaces:
    """Namespaces of a tenant, their policies and the grants on them."""

    def __init__(self, admin: AdminRequests) -> None:
        self._admin = admin

    def _call(self, method: str, namespace: str, tail: str = "", body: Any = None, **params: Any) -> Any:
        return self._admin.request(method, namespace_path(namespace) + tail, body, params or None)

    # -- namespaces -------------------------------------------------------------------------------
    def list(self, tenant: str) -> list[str]:
        """``tenant/namespace`` names of the tenant's namespaces."""
        return list(self._admin.request("GET", f"/admin/v2/namespaces/{quote(tenant)}") or [])

    def create(self, namespace: str, bundles: int | None = None) -> None:
        """Create ``tenant/namespace`` (``ConflictError`` if it exists), cut into ``bundles``
        (the broker's default_number_of_namespace_bundles when None)."""
        self._call("PUT", namespace, body=None if bundles is None else {"bundles": {"numBundles": bundles}})

    # -- bundles ----------------------------------------------------------------------------------
    def get_bundles(self, namespace: str) -> dict[str, Any]:
        """Pulsar's BundlesData: ``{"boundaries": ["0x00000000", ...], "numBundles": N}``."""
        return dict(self._call("GET", namespace, "/bundles") or {})

    def unload(self, namespace: str) -> None:
        """Unload every bundle of the namespace (their clients reconnect to the new owners)."""
        self._call("PUT", namespace, "/unload")

    def unload_namespace_bundle(self, namespace: str, bundle: str) -> None:
        """Unload one bundle (``0x00000000_0x40000000``): its topics close, clients reconnect."""
        self._call("PUT", namespace, f"/{quote(bundle)}/unload")

    def split_namespace_bundle(self, namespace: str, bundle: str, unload_split_bundles: bool = False) -> None:
        """Split one bundle in two halves (range_equally_divide)."""
        params = {"unload": str(unload_split_bundles).lower()}
        self._call("PUT", namespace, f"/{quote(bundle)}/split", **params)

    def delete(self, namespace: str) -> None:
        """Delete an empty namespace (``ConflictError`` while it has topics)."""
        self._call("DELETE", namespace)

    def policies(self, namespace: str) -> dict[str, Any]:
        """Every policy of the namespace, None for those not set."""
        return self._call("GET", namespace)

    # -- replication --------------------------------------------------------------------------------
    def get_namespace_replication_clusters(self, namespace: str) -> builtins.list[str]:
        """The clusters the namespace replicates to (the local cluster alone when not set)."""
        return list(self._call("GET", namespace, "/replication") or [])

    def set_namespace_replication_clusters(self, namespace: str, clusters: Sequence[str]) -> None:
        """Known clusters (412 otherwise) that the tenant allows (403 otherwise)."""
        self._call("POST", namespace, "/replication", list(clusters))

    # -- one-value policies -----------------------------------------------------------------------
    def get_policy(self, namespace: str, policy: str) -> Any:
        """The value of ``policy`` (a path such as ``MESSAGE_TTL``); None when not set."""
        return self._call("GET", namespace, f"/{policy}")

    def set_policy(self, namespace: str, policy: str, value: Any) -> None:
        self._call("POST", namespace, f"/{policy}", value)

    def remove_policy(self, namespace: str, policy: str) -> None:
        self._call("DELETE", namespace, f"/{policy}")

    def get_inactive_topic_policies(self, namespace: str) -> dict[str, Any] | None:
        """Pulsar's InactiveTopicPolicies JSON of the namespace; None when not set."""
        return self.get_policy(namespace, INACTIVE_TOPIC_POLICIES)

    def set_inactive_topic_policies(self, namespace: str, policies: dict[str, Any]) -> None:
        self.set_policy(namespace, INACTIVE_TOPIC_POLICIES, dict(policies))

    def remove_inactive_topic_policies(self, namespace: str) -> None:
        self.remove_policy(namespace, INACTIVE_TOPIC_POLICIES)

    def get_offload_threshold(self, namespace: str) -> int:
        """Bytes the namespace's topics keep locally before older ledgers are offloaded (-1: off)."""
        return int(self._call("GET", namespace, "/offloadThreshold"))

    def set_offload_threshold(self, namespace: str, size_bytes: int) -> None:
        self._call("PUT", namespace, "/offloadThreshold", int(size_bytes))

    def get_offload_threshold_in_seconds(self, namespace: str) -> int:
        """Seconds after its close a ledger is offloaded, whatever its size (-1: off)."""
        return int(self._call("GET", namespace, "/offloadThresholdInSeconds"))

    def set_offload_threshold_in_seconds(self, namespace: str, seconds: int) -> None:
        self._call("PUT", namespace, "/offloadThresholdInSeconds", int(seconds))

    def get_offload_deletion_lag_ms(self, namespace: str) -> int | None:
        """How long an offloaded ledger's local copy stays (ms); None: the broker's setting."""
        return self._call("GET", namespace, "/offloadDeletionLagMs")

    def set_offload_deletion_lag_ms(self, namespace: str, lag_ms: int) -> None:
        self._call("PUT", namespace, "/offloadDeletionLagMs", int(lag_ms))

    def clear_offload_deletion_lag(self, namespace: str) -> None:
        self._call("DELETE", namespace, "/offloadDeletionLagMs")

    def get_offload_policies(self, namespace: str) -> dict[str, Any] | None:
        """Pulsar's OffloadPolicies JSON of the namespace; None when not set."""
        return self._call("GET", namespace, "/offloadPolicies")

    def set_offload_policies(self, namespace: str, policies: dict[str, Any]) -> None:
        self._call("POST", namespace, "/offloadPolicies", dict(policies))

    def remove_offload_policies(self, namespace: str) -> None:
        self._call("DELETE", namespace, "/removeOffloadPolicies")

    def get_compaction_threshold(self, namespace: str) -> int | None:
        """Bytes not compacted yet past which the namespace's topics are compacted by themselves;
        None when not set (the broker's setting applies)."""
        return self.get_policy(namespace, COMPACTION_THRESHOLD)

    def set_compaction_threshold(self, namespace: str, threshold: int) -> None:
        """0: never by threshold. PUT, as Pulsar's admin API takes it."""
        self._call("PUT", namespace, f"/{COMPACTION_THRESHOLD}", int(threshold))

    def remove_compaction_threshold(self, namespace: str) -> None:
        self.remove_policy(namespace, COMPACTION_THRESHOLD)

    def get_message_ttl(self, namespace: str) -> int | None:
        return self.get_policy(namespace, MESSAGE_TTL)

    def set_message_ttl(self, namespace: str, seconds: int) -> None:
        self.set_policy(namespace, MESSAGE_TTL, int(seconds))

    def remove_message_ttl(self, namespace: str) -> None:
        self.remove_policy(namespace, MESSAGE_TTL)

    def get_deduplication(self, namespace: str) -> bool | None:
        return self.get_policy(namespace, DEDUPLICATION)

    def set_deduplication(self, namespace: str, enabled: bool) -> None:
        self.set_policy(namespace, DEDUPLICATION, bool(enabled))

    def remove_deduplication(self, namespace: str) -> None:
        self.remove_policy(namespace, DEDUPLICATION)

    def get_schema_compatibility_strategy(self, namespace: str) -> str | None:
        return self.get_policy(namespace, SCHEMA_COMPATIBILITY_STRATEGY)

    def set_schema_compatibility_strategy(self, namespace: str, strategy: str) -> None:
        self.set_policy(namespace, SCHEMA_COMPATIBILITY_STRATEGY, strategy)

    def get_auto_topic_creation(self, namespace: str) -> dict[str, Any] | None:
        return self.get_policy(namespace, AUTO_TOPIC_CREATION)

    def set_auto_topic_creation(
        self, namespace: str, allow: bool, topic_type: str = "non-partitioned", partitions: int = 1
    ) -> None:
        """Pulsar's AutoTopicCreationOverride: ``topic_type`` "partitioned" or "non-partitioned"."""
        value = {"allowAutoTopicCreation": allow, "topicType": topic_type, "defaultNumPartitions": partitions}
        self.set_policy(namespace, AUTO_TOPIC_CREATION, value)

    # -- retention and backlog quotas -------------------------------------------------------------
    def get_retention(self, namespace: str) -> dict[str, int] | None:
        """``{"retentionTimeInMinutes": m, "retentionSizeInMB": s}``; None when not set."""
        return self._call("GET", namespace, "/retention")

    def set_retention(self, namespace: str, time_minutes: int, size_mb: int) -> None:
        """Keep acknowledged messages ``time_minutes`` and up to ``size_mb`` (-1: no limit)."""
        body = {"retentionTimeInMinutes": int(time_minutes), "retentionSizeInMB": int(size_mb)}
        self._call("POST", namespace, "/retention", body)

    def remove_retention(self, namespace: str) -> None:
        self._call("DELETE", namespace, "/retention")

    def get_backlog_quotas(self, namespace: str) -> dict[str, dict[str, Any]]:
        """The quotas by kind: ``{"destination_storage": {"limitSize", "limitTime", "policy"}}``."""
        return self._call("GET", namespace, "/backlogQuotaMap") or {}

    def set_backlog_quota(
        self,
        namespace: str,
        limit_size: int = -1,
        limit_time: int = -1,
        policy: str = PRODUCER_REQUEST_HOLD,
        quota_type: str = DESTINATION_STORAGE,
    ) -> None:
        """A quota of ``quota_type``: ``limit_size`` bytes or ``limit_time`` seconds (-1: none)."""
        body = {"limitSize": int(limit_size), "limitTime": int(limit_time), "policy": policy}
        self._call("POST", namespace, "/backlogQuota", body, backlogQuotaType=quota_type)

    def remove_backlog_quota(self, namespace: str, quota_type: str = DESTINATION_STORAGE) -> None:
        self._call("DELETE", namespace, "/backlogQuota", backlogQuotaType=quota_type)

    # -- permissions ------------------------------------------------------------------------------
    def get_permissions(self, namespace: str) -> dict[str, builtins.list[str]]:
        """Each role granted on the namespace and its actions."""
        return self._call("GET", namespace, "/permissions") or {}

    def grant_permission(self, namespace: str, role: str, actions: builtins.list[str]) -> None:
        """Let ``role`` do ``actions`` (``produce``, ``consume``, ...) on the namespace."""
        self._call("POST", namespace, f"/permissions/{quote(role)}", list(actions))

    def revoke_permission(self, namespace: str, role: str) -> None:
        self._call("DELETE", namespace, f"/permissions/{quote(role)}")
