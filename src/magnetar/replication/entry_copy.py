"""What one stored entry becomes on the remote cluster: the producer's metadata with
``replicated_from`` set, its payload untouched (a batch stays one batch, compressed as stored; a
chunk stays a chunk), and the SEND's sequence ids taken from the entry's broker index.

The index (PIP 70) numbers every message of a topic partition, so an entry's sequence ids never
repeat and always grow: the remote's deduplication drops what a replicator sends again after a
crash or a lost connection, whoever the original producers were. They go into the copy's metadata
too (a Magnetar remote deduplicates a copied message by its source cluster, original producer and
metadata sequence ids, which recovery finds in the stored entry), except for a chunk, whose
metadata keeps the message's own sequence id shared by all its chunks (chunks are recognised by
their uuid and chunk id there). The producer name and every other field are kept.

An epoch (replicator_state.py) is added above the index, ``epoch << EPOCH_SHIFT``: after the
remote refused an entry and stored later ones, the entry is sent again with sequence ids above
everything sent before.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.broker.entry_search import message_count
from magnetar.broker.replication import message_clusters
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata


@dataclass(frozen=True, slots=True)
class Copy:
    """The SEND that carries one entry to the remote."""

    metadata: wire.MessageMetadata
    payload: memoryview
    sequence_id: int
    highest_sequence_id: int
    num_messages: int
    is_chunk: bool

    @property
    def size(self) -> int:
        return len(self.payload)


@dataclass(frozen=True, slots=True)
class Skip:
    """An entry not for this remote, acknowledged without sending; ``why`` for the logs."""

    why: str


#: Where the epoch sits in a sequence id: indexes up to 2**40 (a trillion messages a partition).
EPOCH_SHIFT = 40


class Unreplicable(Exception):
    """An entry that cannot be copied as it is (no index, unreadable metadata). It is never
    skipped: the replicator holds at it and reports why."""


def copy_of(data: bytes | memoryview, local: str, remote: str, epoch: int = 0) -> Copy | Skip:
    """What the stored entry ``data`` (broker entry metadata in front) becomes on ``remote``."""
    try:
        broker_meta, headers_and_payload = split_entry_metadata(data)
        metadata, payload = parse_metadata(headers_and_payload)
    except ProtocolError as exc:
        raise Unreplicable(f"its message metadata cannot be read: {exc}") from None
    skip = skip_reason(metadata, remote)
    if skip is not None:
        return Skip(skip)
    if broker_meta is None or not broker_meta.HasField("index"):
        raise Unreplicable(
            "it has no broker index (the 'index' broker_entry_metadata_interceptor must be on: "
            "the replicator's sequence ids come from it)"
        )
    count = message_count(metadata)
    base = epoch << EPOCH_SHIFT
    first, last = base + broker_meta.index - count + 1, base + broker_meta.index
    is_chunk = metadata.num_chunks_from_msg > 1
    metadata.replicated_from = local
    if not is_chunk:
        metadata.sequence_id = first
        metadata.highest_sequence_id = last
    return Copy(
        metadata=metadata,
        payload=payload,
        sequence_id=first,
        highest_sequence_id=last,
        num_messages=count,
        is_chunk=is_chunk,
    )


def skip_reason(metadata: wire.MessageMetadata, remote: str) -> str | None:
    """Why a message is not sent to ``remote``, or None if it is: it came from another cluster
    (no loops, as Pulsar's replicators), or its ``replicate_to`` leaves ``remote`` out."""
    if metadata.HasField("replicated_from"):
        return f"replicated from {metadata.replicated_from}"
    # The official client's disable_replication sends ["__local__"], which names no remote.
    if not message_clusters([remote], metadata.replicate_to):
        return "its replicate_to leaves this cluster out"
    return None
