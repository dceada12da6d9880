"""Which clusters a namespace, a topic and one message are replicated to (Pulsar's geo-replication
model), and the names the replication of a topic uses on either side.

A namespace's ``replication_clusters`` (its policies), a topic's override (kept here, in the
metadata store under ``topic-replication/{topic}``; a partition follows its partitioned topic), and
a message's ``MessageMetadata.replicate_to`` (the client's ``replication_clusters`` on send),
which narrows the topic's clusters for that message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from magnetar.broker.entry_search import entry_time
from magnetar.broker.errors import BrokerError, NotAllowed
from magnetar.broker.traffic import Traffic
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.topic_name import TopicName

#: A topic's durable cursor for a remote cluster is ``pulsar.repl.{remote}`` (Pulsar's name).
CURSOR_PREFIX = "pulsar.repl."
#: A replicator's producer on the remote: ``magnetar.repl.{local}-->{remote}``. Not Pulsar's
#: ``pulsar.repl.`` prefix: a Pulsar broker deduplicates such a producer by each message's
#: original producer name alone, which two edges' producers of one name would share; under this
#: name it deduplicates by the replicator's own sequence ids, which come from the local index and
#: never repeat.
PRODUCER_PREFIX = "magnetar.repl."


def cursor_name(remote: str) -> str:
    return CURSOR_PREFIX + remote


def remote_of_cursor(name: str) -> str | None:
    """The remote cluster a replication cursor's ``name`` is for; None for a subscription's."""
    return name[len(CURSOR_PREFIX) :] if name.startswith(CURSOR_PREFIX) else None


def producer_name(local: str, remote: str) -> str:
    return f"{PRODUCER_PREFIX}{local}-->{remote}"


def is_replicator_producer(name: str) -> bool:
    """A geo-replicator's producer: always deduplicated (its exactly-once rests on it)."""
    return name.startswith(PRODUCER_PREFIX)


def replicated_sequence(metadata: wire.MessageMetadata) -> tuple[str, int] | None:
    """How a message copied here by a geo-replicator is deduplicated: (key, highest sequence id),
    or None for a message produced here.

    The key is its source cluster and original producer name, and the sequence ids are those in
    its metadata: a Magnetar replicator writes its own there (from the source's broker index,
    growing for every producer), a Pulsar replicator keeps the original producer's (Pulsar
    deduplicates such messages by those too). Both are in the stored entry, so recovery after a
    crash rebuilds exactly what deduplication knew, whichever connection sent it. Chunks are
    left to the topic's stored-chunks record (a chunked message's chunks share its sequence id).
    """
    if not metadata.HasField("replicated_from") or metadata.num_chunks_from_msg > 1:
        return None
    key = f"replicated-from:{metadata.replicated_from}:{metadata.producer_name}"
    return key, max(metadata.sequence_id, metadata.highest_sequence_id)


def is_replicated_chunk(metadata: wire.MessageMetadata) -> bool:
    return metadata.HasField("replicated_from") and metadata.num_chunks_from_msg > 1


class ReplicatorLink(Protocol):
    """What a topic knows of a replicator attached to it (the replicator lives in
    magnetar.replication, above the broker): it is woken by new entries and reports its stats."""

    #: Messages and bytes sent to the remote, and their rates (the broker's stats task updates them).
    traffic: Traffic

    def notify_new_entries(self) -> None: ...

    def stats(self) -> dict[str, Any]:
        """What the replicator knows (rates, counts, connection, errors), over
        ``IDLE_REPLICATOR_STATS``; the backlog and delay come from the cursor."""
        ...


class ClusterNotAllowed(BrokerError):
    """A cluster the tenant's ``allowedClusters`` does not name (Pulsar answers 403)."""

    code = wire.AuthorizationError


def effective_clusters(
    topic_override: Sequence[str] | None, namespace_clusters: Sequence[str] | None, local: str
) -> list[str]:
    """The remote clusters a topic replicates to: its override if set, else its namespace's, without
    the local cluster; in the order given, once each."""
    chosen = topic_override if topic_override is not None else namespace_clusters or ()
    return list(dict.fromkeys(c for c in chosen if c != local))


def message_clusters(effective: Sequence[str], replicate_to: Iterable[str]) -> list[str]:
    """The clusters one message goes to: the topic's ``effective`` ones, narrowed to the message's
    ``replicate_to`` when it names any (empty: all of them)."""
    wanted = set(replicate_to)
    if not wanted:
        return list(effective)
    return [c for c in effective if c in wanted]


def check_clusters(value: Any, known: Iterable[str], allowed: Iterable[str]) -> list[str]:
    """A replication-clusters body: a JSON list of known cluster names the tenant allows.

    ValueError (400) if not a list of names; NotAllowed (412) for an empty list, ``global`` or an
    unknown cluster; ClusterNotAllowed (403) for one the tenant does not allow."""
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise ValueError("replication clusters must be a JSON list of cluster names")
    if not value:
        raise NotAllowed("ClusterIds should not be null or empty")
    if "global" in value:
        raise NotAllowed("Cannot specify global in the list of replication clusters")
    known, allowed = set(known), set(allowed)
    for cluster in value:
        if cluster not in known:
            raise NotAllowed(f"Invalid cluster id: {cluster}")
    for cluster in value:
        if cluster not in allowed:
            raise ClusterNotAllowed(
                f"Cluster {cluster} is not in the list of allowed clusters list for tenant"
            )
    return list(dict.fromkeys(value))


def _key(topic: TopicName) -> str:
    return f"topic-replication/{topic.partitioned_base() or topic}"


class TopicReplication:
    """Topics' replication-cluster overrides, durable in the metadata store."""

    def __init__(self, metadata) -> None:
        self._kv = metadata

    def get(self, topic: TopicName) -> list[str] | None:
        """The override of ``topic`` (or of its partitioned topic); None if not set."""
        raw = self._kv.get(_key(topic))
        return json.loads(raw) if raw is not None else None

    def set(self, topic: TopicName, clusters: list[str]) -> None:
        self._kv.put(_key(topic), json.dumps(clusters))

    def remove(self, topic: TopicName) -> None:
        self._kv.delete(_key(topic))

    def all(self) -> dict[str, list[str]]:
        """Every override, by topic name."""
        prefix = "topic-replication/"
        return {k.removeprefix(prefix): json.loads(self._kv.get(k)) for k in self._kv.keys(prefix)}


#: Pulsar's ReplicatorStats fields (and ours), as they read while no replicator runs.
IDLE_REPLICATOR_STATS: dict[str, Any] = {
    "msgRateIn": 0.0,
    "msgThroughputIn": 0.0,
    "msgRateOut": 0.0,
    "msgThroughputOut": 0.0,
    "msgRateExpired": 0.0,
    "msgOutCount": 0,
    "bytesOutCount": 0,
    "replicationBacklog": 0,
    "connected": False,
    "replicationDelayInSeconds": 0,
    "inboundConnection": "",
    "inboundConnectedSince": "",
    "outboundConnection": "",
    "outboundConnectedSince": "",
    "producerName": "",
    "epoch": 0,
    "refusedEntries": 0,
    "lastError": "",
}


def replication_delay_seconds(ml, cursor, now: float | None = None) -> int:
    """Age of the oldest entry ``cursor`` has not yet replicated (by broker time, else publish
    time); 0 when none is waiting."""
    first = ml.next_position(cursor.mark_delete_position)
    if first > ml.last_confirmed:
        return 0
    try:
        stamp = entry_time(ml.read_entry(first).data)
    except (ProtocolError, OSError, ValueError):
        return 0
    if stamp <= 0:
        return 0
    return max(0, int((time.time() if now is None else now) - stamp / 1000))


def replication_stats(topic) -> dict[str, dict]:
    """Pulsar's ``replication`` section: per remote cluster, the same fields whether or not its
    replicator runs yet: the cursor's backlog and delay, and what the replicator reports."""
    out = {}
    for remote, cursor in list(topic.replication_cursors.items()):
        stats = {
            **IDLE_REPLICATOR_STATS,
            "replicationBacklog": cursor.backlog(),
            "replicationDelayInSeconds": replication_delay_seconds(topic.ml, cursor),
        }
        replicator = topic.replicators.get(remote)
        if replicator is not None:
            stats.update(replicator.stats())
        out[remote] = stats
    return out
