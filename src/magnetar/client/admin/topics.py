"""Typed admin calls for topics and their subscriptions, as the Java client's ``admin.topics()``:

    admin = AdminClient("http://127.0.0.1:8080")
    admin.topics.create_partitioned_topic("persistent://public/default/t", 4)
    admin.topics.create_subscription("persistent://public/default/t", "sub", "earliest")
    admin.topics.stats("persistent://public/default/t-partition-0")["msgInCounter"]

Topic names are read as Pulsar reads them (``t`` is ``persistent://public/default/t``). Message ids
are ``"earliest"``, ``"latest"``, a ``magnetar.client.MessageId``, an official ``pulsar.MessageId``,
a ``(ledger, entry)`` tuple or Pulsar's JSON (``{"ledgerId": .., "entryId": ..}``). Failures raise
``AdminError`` and its subclasses, as every ``AdminClient`` call does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.client.admin.errors import NotFoundError
from magnetar.client.admin.paths import message_id_parts, namespace_parts, quote, topic_path
from magnetar.protocol.batch import iter_batch
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.client.admin.requests import AdminRequests

#: Pulsar's JSON for the two ends of a topic (``latest``: both fields Long.MAX_VALUE).
_INT64_MAX = (1 << 63) - 1
EARLIEST_JSON = {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
LATEST_JSON = {"ledgerId": _INT64_MAX, "entryId": _INT64_MAX, "partitionIndex": -1}


def message_id_json(message_id: Any) -> dict[str, int]:
    """Pulsar's message-id JSON for any accepted form of an id (see the module's docstring)."""
    if isinstance(message_id, str):
        word = message_id.strip().lower()
        if word == "earliest":
            return dict(EARLIEST_JSON)
        if word == "latest":
            return dict(LATEST_JSON)
        raise ValueError(f"{message_id!r}: a message id is earliest, latest or an id, not text")
    if isinstance(message_id, dict) and "partitionIndex" in message_id and "batchIndex" not in message_id:
        return {k: int(message_id[k]) for k in ("ledgerId", "entryId", "partitionIndex")}
    ledger, entry, _batch, partition = message_id_parts(message_id)
    return {"ledgerId": ledger, "entryId": entry, "partitionIndex": partition}


@dataclass(frozen=True, slots=True)
class PeekedMessage:
    """One stored message read without consuming it: its id (``ledger:entry``, and
    ``:partition:batch index`` for a message of a batch), properties, payload and the entry's
    ``X-Pulsar-*`` metadata headers (producer name, publish time, ...)."""

    message_id: str
    properties: dict[str, str]
    payload: bytes
    metadata: dict[str, str] = field(default_factory=dict)
    batch_index: int = -1

    @property
    def publish_time(self) -> str | None:
        return self.metadata.get("X-Pulsar-publish-time")


def split_entry(body: bytes, headers: dict[str, str]) -> list[PeekedMessage]:
    """The messages of one entry as the admin API answers it (``body`` the decompressed payload,
    ``headers`` its metadata): one, or each message of a batch."""
    metadata = {k: v for k, v in headers.items() if k.lower().startswith("x-pulsar-")}
    lower = {k.lower(): v for k, v in metadata.items()}
    entry_id = lower.get("x-pulsar-message-id", "")
    properties = json.loads(lower.get("x-pulsar-property") or "{}")
    count = lower.get("x-pulsar-num-batch-message")
    if count is None:
        return [PeekedMessage(entry_id, properties, bytes(body), metadata)]
    return [
        PeekedMessage(
            f"{entry_id}:-1:{index}",
            {kv.key: kv.value for kv in single.properties},
            bytes(payload),
            metadata,
            index,
        )
        for index, (single, payload) in enumerate(iter_batch(body, int(count)))
    ]


def _domain_namespace_path(namespace: str, domain: str) -> str:
    return f"/admin/v2/{domain}/{namespace_parts(namespace)}"


class Topics:
    """pulsar-admin's ``topics`` calls the broker serves (``AdminClient.topics``)."""

    def __init__(self, admin: AdminRequests) -> None:
        self._admin = admin

    def _request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        return self._admin.request(method, path, body, params)

    # -- listing, creating, deleting --------------------------------------------------------------
    def get_list(self, namespace: str, domain: str = "persistent") -> list[str]:
        """The namespace's topics of ``domain`` (partitions listed one by one)."""
        return list(self._request("GET", _domain_namespace_path(namespace, domain)) or [])

    def get_partitioned_topic_list(self, namespace: str, domain: str = "persistent") -> list[str]:
        return list(self._request("GET", _domain_namespace_path(namespace, domain) + "/partitioned") or [])

    def create_non_partitioned_topic(self, topic: str) -> None:
        self._request("PUT", topic_path(topic))

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        self._request("PUT", f"{topic_path(topic)}/partitions", partitions)

    def update_partitioned_topic(self, topic: str, partitions: int) -> None:
        """Raise the partition count (the broker refuses to lower it)."""
        self._request("POST", f"{topic_path(topic)}/partitions", partitions)

    def get_partitioned_topic_metadata(self, topic: str) -> dict[str, Any]:
        """``{"partitions": N}``; 0 partitions for a topic that is not partitioned."""
        return self._request("GET", f"{topic_path(topic)}/partitions")

    def delete(self, topic: str) -> None:
        self._request("DELETE", topic_path(topic))

    def delete_partitioned_topic(self, topic: str) -> None:
        self._request("DELETE", f"{topic_path(topic)}/partitions")

    def terminate_topic(self, topic: str) -> dict[str, int]:
        """Refuse further messages; the id of the last one stored (Pulsar's JSON)."""
        return self._request("POST", f"{topic_path(topic)}/terminate")

    def terminate_partitioned_topic(self, topic: str) -> dict[str, dict[str, int]]:
        """Terminate every partition; the id of each one's last message, by partition index."""
        return self._request("POST", f"{topic_path(topic)}/terminate/partitions")

    # -- compaction -----------------------------------------------------------------------------------
    def trigger_compaction(self, topic: str) -> None:
        """Start compacting the topic (every partition of a partitioned one); raises a 409
        ``AdminError`` while a compaction is running."""
        self._request("PUT", f"{topic_path(topic)}/compaction")

    def compaction_status(self, topic: str) -> dict[str, Any]:
        """Pulsar's LongRunningProcessStatus JSON: ``status`` (NOT_RUN, RUNNING, SUCCESS or ERROR)
        and ``lastError``."""
        return self._request("GET", f"{topic_path(topic)}/compaction")

    # -- tiered storage --------------------------------------------------------------------------------
    def trigger_offload(self, topic: str, ledger_id: int, entry_id: int = 0) -> None:
        """Offload every closed ledger before ledger ``ledger_id`` (Pulsar's ``PUT .../offload``
        with a message id); raises a 409 ``AdminError`` while an offload is running."""
        body = {"ledgerId": ledger_id, "entryId": entry_id, "partitionIndex": -1}
        self._request("PUT", f"{topic_path(topic)}/offload", body)

    def offload_status(self, topic: str) -> dict[str, Any]:
        """Pulsar's OffloadProcessStatus JSON: ``status`` (NOT_RUN, RUNNING, SUCCESS or ERROR),
        ``lastError`` and ``firstUnoffloadedMessage``."""
        return self._request("GET", f"{topic_path(topic)}/offload")

    def get_offload_policies(self, topic: str, applied: bool = False) -> dict[str, Any] | None:
        """The topic's own OffloadPolicies JSON (None when not set); ``applied``: what applies."""
        params = {"applied": "true"} if applied else None
        return self._admin.request("GET", f"{topic_path(topic)}/offloadPolicies", None, params)

    def set_offload_policies(self, topic: str, policies: dict[str, Any]) -> None:
        self._request("POST", f"{topic_path(topic)}/offloadPolicies", dict(policies))

    def remove_offload_policies(self, topic: str) -> None:
        self._request("DELETE", f"{topic_path(topic)}/offloadPolicies")

    def get_compaction_threshold(self, topic: str, applied: bool = False) -> int | None:
        """The topic's own compaction threshold in bytes, None if not set; ``applied``: what applies
        (its own, else its namespace's, else the broker's)."""
        params = {"applied": "true"} if applied else None
        return self._request("GET", f"{topic_path(topic)}/compactionThreshold", params=params)

    def set_compaction_threshold(self, topic: str, threshold: int) -> None:
        """Compact the topic by itself once this many bytes are not compacted yet; 0: never."""
        self._request("POST", f"{topic_path(topic)}/compactionThreshold", int(threshold))

    def remove_compaction_threshold(self, topic: str) -> None:
        self._request("DELETE", f"{topic_path(topic)}/compactionThreshold")

    # -- replication (a topic's override of its namespace's clusters) ---------------------------------
    def get_replication_clusters(self, topic: str, applied: bool = False) -> list[str] | None:
        """The topic's own replication clusters, None if not set; ``applied``: what applies
        (the override, else the namespace's)."""
        params = {"applied": "true"} if applied else None
        return self._request("GET", f"{topic_path(topic)}/replication", params=params)

    def set_replication_clusters(self, topic: str, clusters: Sequence[str]) -> None:
        self._request("POST", f"{topic_path(topic)}/replication", list(clusters))

    def remove_replication_clusters(self, topic: str) -> None:
        self._request("DELETE", f"{topic_path(topic)}/replication")

    # -- inactive-topic policies (the topic's own, over its namespace's) ------------------------------
    def get_inactive_topic_policies(self, topic: str, applied: bool = False) -> dict[str, Any] | None:
        """The topic's own InactiveTopicPolicies JSON, None if not set; ``applied``: what applies
        (its own, else its namespace's, else the broker's)."""
        params = {"applied": "true"} if applied else None
        return self._request("GET", f"{topic_path(topic)}/inactiveTopicPolicies", params=params)

    def set_inactive_topic_policies(self, topic: str, policies: dict[str, Any]) -> None:
        self._request("POST", f"{topic_path(topic)}/inactiveTopicPolicies", dict(policies))

    def remove_inactive_topic_policies(self, topic: str) -> None:
        self._request("DELETE", f"{topic_path(topic)}/inactiveTopicPolicies")

    # -- stats ---------------------------------------------------------------------------------------
    def stats(self, topic: str) -> dict[str, Any]:
        return self._request("GET", f"{topic_path(topic)}/stats")

    def partitioned_stats(self, topic: str, per_partition: bool = False) -> dict[str, Any]:
        params = {"perPartition": "true" if per_partition else "false"}
        return self._request("GET", f"{topic_path(topic)}/partitioned-stats", params=params)

    def internal_stats(self, topic: str) -> dict[str, Any]:
        return self._request("GET", f"{topic_path(topic)}/internalStats")

    # -- reading stored messages -----------------------------------------------------------------
    def peek_messages(self, topic: str, subscription: str, count: int) -> list[PeekedMessage]:
        """Up to ``count`` messages after the subscription's mark-delete position, unconsumed."""
        messages: list[PeekedMessage] = []
        position = 1
        while len(messages) < count:
            path = f"{topic_path(topic)}/subscription/{quote(subscription)}/position/{position}"
            try:
                body, headers = self._admin.request_bytes("GET", path)
            except NotFoundError as exc:
                if exc.reason.startswith("Message not found"):
                    break  # fewer stored than asked for
                raise
            messages += split_entry(body, headers)
            position += 1
        return messages[:count]

    def get_message_by_id(self, topic: str, ledger_id: int, entry_id: int) -> list[PeekedMessage]:
        """The messages of one stored entry (several for a batch)."""
        path = f"{topic_path(topic)}/ledger/{int(ledger_id)}/entry/{int(entry_id)}"
        return split_entry(*self._admin.request_bytes("GET", path))

    # -- subscriptions -------------------------------------------------------------------------------
    def get_subscriptions(self, topic: str) -> list[str]:
        return list(self._request("GET", f"{topic_path(topic)}/subscriptions") or [])

    def create_subscription(self, topic: str, subscription: str, message_id: Any = "latest") -> None:
        """A durable subscription whose cursor starts at ``message_id``."""
        self._request("PUT", self._sub(topic, subscription), message_id_json(message_id))

    def delete_subscription(self, topic: str, subscription: str, force: bool = False) -> None:
        """Unsubscribe (``force``: even while consumers are connected, closing them)."""
        params = {"force": "true"} if force else None
        self._request("DELETE", self._sub(topic, subscription), params=params)

    def skip_messages(self, topic: str, subscription: str, count: int) -> None:
        self._request("POST", f"{self._sub(topic, subscription)}/skip/{int(count)}")

    def skip_all_messages(self, topic: str, subscription: str) -> None:
        """Clear the subscription's backlog."""
        self._request("POST", f"{self._sub(topic, subscription)}/skip_all")

    def reset_cursor(self, topic: str, subscription: str, timestamp_ms: int) -> None:
        """Move the cursor to the first message published at or after ``timestamp_ms``."""
        self._request("POST", f"{self._sub(topic, subscription)}/resetcursor/{int(timestamp_ms)}")

    def reset_cursor_to_message_id(
        self, topic: str, subscription: str, message_id: Any, is_excluded: bool = False
    ) -> None:
        """Move the cursor to ``message_id`` (``is_excluded``: just after it)."""
        params = {"isExcluded": "true"} if is_excluded else None
        path = f"{self._sub(topic, subscription)}/resetcursor"
        self._request("POST", path, message_id_json(message_id), params)

    def expire_messages(self, topic: str, subscription: str, expire_time_seconds: int) -> None:
        """Acknowledge, for the subscription, the messages older than ``expire_time_seconds``."""
        self._request("POST", f"{self._sub(topic, subscription)}/expireMessages/{int(expire_time_seconds)}")

    def expire_messages_for_all_subscriptions(self, topic: str, expire_time_seconds: int) -> None:
        path = f"{topic_path(topic)}/all_subscription/expireMessages/{int(expire_time_seconds)}"
        self._request("POST", path)

    def consumers(self, topic: str, subscription: str, offset: int = 0, limit: int | None = None) -> dict:
        """One page of a subscription's consumers (``total``, ``consumers``, ``next``...)."""
        params: dict[str, Any] = {"offset": offset}
        if limit is not None:
            params["limit"] = limit
        return self._request("GET", f"{self._sub(topic, subscription)}/consumers", params=params)

    def _sub(self, topic: str, subscription: str) -> str:
        return f"{topic_path(topic)}/subscription/{quote(subscription)}"

    # -- permissions ---------------------------------------------------------------------------------
    def get_permissions(self, topic: str) -> dict[str, list[str]]:
        return self._admin.get_permissions(topic)

    def grant_permission(self, topic: str, role: str, actions: Iterable[str]) -> None:
        self._admin.grant_permission(topic, role, list(actions))

    def revoke_permissions(self, topic: str, role: str) -> None:
        self._admin.revoke_permissions(topic, role)


def full_name(topic: str) -> str:
    """``topic`` as Pulsar names it in full (``t`` is ``persistent://public/default/t``)."""
    return str(TopicName.parse(topic))
