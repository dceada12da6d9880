"""What one stored entry becomes on the remote cluster: the producer's metadata with
``replicated_from`` set, its payload untouched (a batch stays one batch, compressed as stored; a
chunk stays a chunk), and the SEND's sequence ids taken from the entry's broker index.

The index (PIP 70) numbers every message of a topic partition, so an entry's sequence ids never
repeat and always grow: the remote's deduplication drops what a replicator sends again after a
crash or a lost connection, whoever the original producers were.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from magnetar.broker.entry_search import message_count
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


class Unreplicable(Exception):
    """An entry that cannot be copied as it is (no index, unreadable metadata). It is never
    skipped: the replicator holds at it and reports why."""


def copy_of(data: bytes | memoryview, local: str, remote: str) -> Copy | Skip:
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
    metadata.replicated_from = local
    return Copy(
        metadata=metadata,
        payload=payload,
        sequence_id=broker_meta.index - count + 1,
        highest_sequence_id=broker_meta.index,
        num_messages=count,
        is_chunk=metadata.num_chunks_from_msg > 1,
    )


def skip_reason(metadata: wire.MessageMetadata, remote: str) -> str | None:
    """Why a message is not sent to ``remote``, or None if it is: it came from another cluster
    (no loops, as Pulsar's replicators), or its ``replicate_to`` leaves ``remote`` out."""
    if metadata.HasField("replicated_from"):
        return f"replicated from {metadata.replicated_from}"
    if not wanted_by(metadata.replicate_to, remote):
        return "its replicate_to leaves this cluster out"
    return None


def wanted_by(replicate_to: Sequence[str], remote: str) -> bool:
    """A message's ``replicate_to`` (empty: every cluster of its topic) lets it go to ``remote``;
    the official client's ``disable_replication`` sends ``["__local__"]``, which names none."""
    return not replicate_to or remote in replicate_to
