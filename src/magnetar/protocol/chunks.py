"""Which chunk of a chunked message (PIP 37) a message's metadata names, if any.

A producer splits a large message into chunks that share the message's ``uuid`` and sequence
id; each names its ``chunk_id`` and the ``num_chunks_from_msg``. A "message" of one chunk is
a whole message.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.protocol import pulsar_wire_pb2 as wire


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """One chunk: its message's uuid, its id, and how many chunks the message has."""

    uuid: str
    chunk_id: int
    num_chunks: int

    @property
    def last(self) -> bool:
        return self.chunk_id >= self.num_chunks - 1


def chunk_ref(metadata: wire.MessageMetadata | None) -> ChunkRef | None:
    """The chunk ``metadata`` describes, or None for a whole message."""
    if metadata is None or not metadata.HasField("chunk_id") or metadata.num_chunks_from_msg <= 1:
        return None
    return ChunkRef(metadata.uuid, metadata.chunk_id, metadata.num_chunks_from_msg)
