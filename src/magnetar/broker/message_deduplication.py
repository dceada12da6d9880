"""Broker-side deduplication of one persistent topic, as Pulsar's ``MessageDeduplication``.

A producer numbers its messages; a send whose sequence id is not above the highest one the
topic has taken from that producer (stored, or still being stored) is a resend of something
already there, and is answered as a duplicate instead of being stored again. Two maps hold
that, as in Pulsar: ``highest_pushed`` (taken, perhaps not yet durable: it answers resends
that arrive while the first copy is in flight) and ``highest_persisted`` (durable: what a new
producer of the same name is told, and what the topic's snapshot keeps across restarts).

The rules on which a send's sequence id counts (``sequence_key``) are shared with recovery
(topic_state.py), so the replay of stored entries rebuilds exactly what deduplication knew:

- every chunk of a chunked message carries the message's sequence id, so only the last chunk
  records it; the others are only checked (a chunk sent again is recognised by the topic's
  ``StoredChunks``, which this class holds, since sequence ids cannot tell chunks apart);
- a message a geo-replicator copied here is keyed by its source cluster and original producer
  and the sequence ids in its metadata (``replication.replicated_sequence``); its chunks are
  left to ``StoredChunks`` alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from magnetar.broker.replication import is_replicated_chunk, replicated_sequence
from magnetar.broker.stored_chunks import StoredChunks
from magnetar.protocol import wire
from magnetar.protocol.chunks import ChunkRef


class SequenceKey(NamedTuple):
    """Whose sequence id a stored message carries and what deduplication does with it (a tuple:
    one is made per send)."""

    #: The producer name, or for a geo-replicated copy its source cluster and original producer.
    producer: str
    #: The highest sequence id the message (or batch) carries.
    highest: int
    #: The message moves the producer's highest sequence id (not a leading chunk).
    records: bool = True
    #: The message is checked against it at all (not a geo-replicated chunk).
    checks: bool = True


def sequence_key(
    producer_name: str, highest: int, metadata: wire.MessageMetadata | None, chunk: ChunkRef | None
) -> SequenceKey:
    """The key a message is deduplicated by (``producer_name`` and ``highest``: the sender's)."""
    replicated = replicated_sequence(metadata) if metadata is not None else None
    if replicated is not None:
        return SequenceKey(*replicated)
    if chunk is not None and metadata is not None and is_replicated_chunk(metadata):
        return SequenceKey(producer_name, highest, records=False, checks=False)
    return SequenceKey(producer_name, highest, records=chunk is None or chunk.last)


def record_persisted(highest_persisted: dict[str, int], key: SequenceKey) -> None:
    """``key``'s message is durable: the producer's highest sequence id goes up to it."""
    if key.records and key.highest > highest_persisted.get(key.producer, -1):
        highest_persisted[key.producer] = key.highest


class MessageDeduplication:
    """The topic's sequence ids per producer and its recent chunks; ``enabled`` reads the
    namespace's policy (or the broker's setting) at each send, so a change applies at once."""

    def __init__(
        self, enabled: Callable[[], bool], highest_persisted: dict[str, int], stored_chunks: StoredChunks
    ) -> None:
        self._enabled = enabled
        #: Highest sequence id stored per producer name (survives restarts: the topic's snapshot).
        self.highest_persisted = highest_persisted
        #: Highest sequence id accepted per producer, stored or still in flight.
        self._highest_pushed: dict[str, int] = {}
        #: Chunks of recent chunked messages, so a chunk sent again is not stored again.
        self.stored_chunks = stored_chunks

    def is_enabled(self) -> bool:
        return self._enabled()

    def last_sequence_id(self, producer: str) -> int:
        """What a producer of this name is told it last stored (-1: nothing)."""
        return self.highest_persisted.get(producer, -1)

    def highest_sequence_id(self, producer: str) -> int:
        """The highest sequence id taken from ``producer``, stored or still being stored (-1: none):
        a sender numbering its own messages goes on above it."""
        return max(self._highest_pushed.get(producer, -1), self.highest_persisted.get(producer, -1))

    def is_duplicate(self, key: SequenceKey, replicator: bool) -> bool:
        """True when ``key``'s message must not be stored again; otherwise, with deduplication on
        (always for a geo-replicator), it is taken as pushed."""
        if not key.checks or not (replicator or self.is_enabled()):
            return False
        if key.highest <= self._highest_pushed.get(key.producer, self.last_sequence_id(key.producer)):
            return True
        if key.records:
            self._highest_pushed[key.producer] = key.highest
        return False

    def persisted(self, key: SequenceKey) -> None:
        """``key``'s message is durable (``record_persisted``, inline on the publish path)."""
        if key.records and key.highest > self.highest_persisted.get(key.producer, -1):
            self.highest_persisted[key.producer] = key.highest

    def not_persisted(self, key: SequenceKey) -> None:
        """The store failed: a resend of this sequence id must not count as a duplicate."""
        if key.producer in self._highest_pushed:
            self._highest_pushed[key.producer] = self.last_sequence_id(key.producer)

    def not_pushed(self, key: SequenceKey) -> None:
        """The entry was refused before it was added: nothing of it is in flight."""
        self._highest_pushed.pop(key.producer, None)
