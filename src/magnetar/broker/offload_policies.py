"""Pulsar's offload policies: when a topic's closed ledgers go to the object store
(``offloadThreshold``, bytes kept locally: -1 off, 0 as soon as closed; ``offloadThresholdInSeconds``,
how long after its close a ledger goes: -1 off) and how long their local copies stay after
(``offloadDeletionLag``). Set per topic (``offloadPolicies``), per namespace (``offloadPolicies``, or
the older ``offloadThreshold``, ``offloadThresholdInSeconds`` and ``offloadDeletionLagMs``), or by
the broker's ``managed_ledger_offload_*`` settings, in that order (docs/tiered-storage.md).

The JSON is Pulsar's OffloadPoliciesImpl. One broker offloads to one store, its own: a body may
repeat the broker's driver, but naming another is refused rather than ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from magnetar.protocol.topic_name import TopicName

THRESHOLD = "managedLedgerOffloadThresholdInBytes"
THRESHOLD_SECONDS = "managedLedgerOffloadThresholdInSeconds"
DELETION_LAG = "managedLedgerOffloadDeletionLagInMillis"
DRIVER = "managedLedgerOffloadDriver"
#: Pulsar's OffloadPoliciesImpl fields (those naming a store are taken only if they are the broker's).
KNOWN = {
    "offloadersDirectory",
    DRIVER,
    "managedLedgerOffloadMaxThreads",
    "managedLedgerOffloadPrefetchRounds",
    THRESHOLD,
    THRESHOLD_SECONDS,
    DELETION_LAG,
    "managedLedgerOffloadedReadPriority",
    "managedLedgerExtraConfigurations",
    "s3ManagedLedgerOffloadRegion",
    "s3ManagedLedgerOffloadBucket",
    "s3ManagedLedgerOffloadServiceEndpoint",
    "s3ManagedLedgerOffloadMaxBlockSizeInBytes",
    "s3ManagedLedgerOffloadReadBufferSizeInBytes",
    "s3ManagedLedgerOffloadCredentialId",
    "s3ManagedLedgerOffloadCredentialSecret",
    "s3ManagedLedgerOffloadRole",
    "s3ManagedLedgerOffloadRoleSessionName",
    "gcsManagedLedgerOffloadRegion",
    "gcsManagedLedgerOffloadBucket",
    "gcsManagedLedgerOffloadMaxBlockSizeInBytes",
    "gcsManagedLedgerOffloadReadBufferSizeInBytes",
    "gcsManagedLedgerOffloadServiceAccountKeyFile",
    "fileSystemProfilePath",
    "fileSystemURI",
    "managedLedgerOffloadBucket",
    "managedLedgerOffloadRegion",
    "managedLedgerOffloadServiceEndpoint",
    "managedLedgerOffloadMaxBlockSizeInBytes",
    "managedLedgerOffloadReadBufferSizeInBytes",
}
#: Fields never echoed back (Pulsar keeps them; an admin GET here does not show them).
SECRET = {"s3ManagedLedgerOffloadCredentialSecret"}


@dataclass(frozen=True)
class OffloadPolicies:
    """What applies to a topic: bytes kept locally before older ledgers are offloaded (-1: not by
    size), milliseconds a verified offload's local copy is kept (-1: kept), and seconds after its
    close a ledger is offloaded whatever its size (-1: not by age)."""

    threshold_bytes: int = -1
    deletion_lag_ms: int = 4 * 3600 * 1000
    threshold_seconds: int = -1

    @property
    def automatic(self) -> bool:
        """Whether ledgers are offloaded without an admin call (by size or by age)."""
        return self.threshold_bytes >= 0 or self.threshold_seconds >= 0

    def to_json(self) -> dict[str, Any]:
        return {
            THRESHOLD: self.threshold_bytes,
            THRESHOLD_SECONDS: self.threshold_seconds,
            DELETION_LAG: self.deletion_lag_ms,
        }


def _optional_int(data: dict[str, Any], key: str, minimum: int) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{key} must be a whole number of at least {minimum}")
    return value


def checked(data: Any, broker_driver: str | None) -> dict[str, Any]:
    """Pulsar's OffloadPolicies JSON, checked (ValueError says what is wrong); unknown fields refused."""
    if not isinstance(data, dict):
        raise ValueError("offload policies must be a JSON object")
    unknown = sorted(set(data) - KNOWN)
    if unknown:
        raise ValueError(f"unknown offload policy field(s): {', '.join(unknown)}")
    _optional_int(data, THRESHOLD, -1)
    _optional_int(data, THRESHOLD_SECONDS, -1)
    _optional_int(data, DELETION_LAG, -1)
    driver = data.get(DRIVER)
    if driver not in (None, "") and (broker_driver is None or str(driver).lower() != broker_driver.lower()):
        raise ValueError(
            f"{DRIVER} {driver!r}: this broker offloads to its own store only"
            f" (managed_ledger_offload_driver = {broker_driver!r})"
        )
    return {key: value for key, value in data.items() if value is not None}


def shown(data: dict[str, Any]) -> dict[str, Any]:
    """Stored policies as an admin GET answers them (secrets left out)."""
    return {key: value for key, value in data.items() if key not in SECRET}


def applied(
    topic: dict[str, Any] | None,
    namespace: dict[str, Any] | None,
    namespace_threshold: int | None,
    namespace_lag_ms: int | None,
    broker: OffloadPolicies,
    namespace_threshold_seconds: int | None = None,
) -> OffloadPolicies:
    """The topic's own policies, else its namespace's (``offloadPolicies``, then the older
    ``offloadThreshold`` / ``offloadThresholdInSeconds`` / ``offloadDeletionLagMs``), else the
    broker's: field by field."""

    def pick(broker_value: int, namespace_value: int | None, key: str) -> int:
        value = broker_value
        for candidate in (namespace_value, (namespace or {}).get(key), (topic or {}).get(key)):
            if candidate is not None:
                value = candidate
        return value

    return OffloadPolicies(
        pick(broker.threshold_bytes, namespace_threshold, THRESHOLD),
        pick(broker.deletion_lag_ms, namespace_lag_ms, DELETION_LAG),
        pick(broker.threshold_seconds, namespace_threshold_seconds, THRESHOLD_SECONDS),
    )


def _key(topic: TopicName) -> str:
    return f"topic-offload-policies/{topic.partitioned_base() or topic}"


class TopicOffloadPolicies:
    """Topics' own offload policies (a partitioned topic's apply to its partitions), durable in the
    metadata store."""

    def __init__(self, metadata: Any) -> None:
        self._kv = metadata

    def get(self, topic: TopicName) -> dict[str, Any] | None:
        raw = self._kv.get(_key(topic))
        return json.loads(raw) if raw is not None else None

    def set(self, topic: TopicName, policies: dict[str, Any]) -> None:
        self._kv.put(_key(topic), json.dumps(policies))

    def remove(self, topic: TopicName) -> None:
        self._kv.delete(_key(topic))
