"""What topic compaction reads of a stored entry, and how it rewrites a batch it keeps only part of.

Compaction (Pulsar's two-phase compactor) keeps the latest message of each key. It looks at an
entry's messages one by one: a batch is compacted message by message, and when only some of a
batch's messages are kept the entry is rewritten with the others marked ``compacted_out`` (empty,
as Pulsar's ``RawBatchConverter`` does), so every kept message keeps its batch index and therefore
its message id. An encrypted batch cannot be looked into: it counts as one message with the key of
its metadata, kept or dropped whole, as in Pulsar.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.batch import encode_batch, iter_batch
from magnetar.protocol.chunks import ChunkRef, chunk_ref
from magnetar.protocol.compression import compress, decompress
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import encode_headers_and_payload, parse_metadata


@dataclass(frozen=True, slots=True)
class KeyedMessage:
    """One message as compaction sees it: its key (None: kept out of the compacted view) and whether
    its payload is empty (with a key, a tombstone that removes the key)."""

    key: str | None
    empty: bool


@dataclass(frozen=True, slots=True)
class EntryFacts:
    """An entry's messages (one, or a batch's in order), whether it is a batch compaction may
    rewrite, the chunk it is (None: a whole message) and its producer."""

    messages: tuple[KeyedMessage, ...]
    batch: bool
    chunk: ChunkRef | None
    producer: str


def entry_facts(entry: bytes | memoryview) -> EntryFacts:
    """Read a stored entry (broker entry metadata in front or not) for compaction.

    Raises ``ProtocolError`` for an entry that cannot be read (the compactor keeps it out).
    """
    _, headers_and_payload = split_entry_metadata(entry)
    metadata, payload = parse_metadata(headers_and_payload)
    key = metadata.partition_key if metadata.HasField("partition_key") else None
    chunk = chunk_ref(metadata)
    if (
        metadata.HasField("num_messages_in_batch")
        and not metadata.HasField("encryption_param")
        and chunk is None
    ):
        body = _uncompressed(metadata, payload)
        messages = tuple(
            KeyedMessage(
                None
                if single.compacted_out or not single.HasField("partition_key")
                else single.partition_key,
                single.payload_size == 0 or single.null_value,
            )
            for single, _ in iter_batch(body, metadata.num_messages_in_batch)
        )
        return EntryFacts(messages, True, None, metadata.producer_name)
    if metadata.null_value:
        empty = True
    elif metadata.compression != wire.NONE and metadata.HasField("uncompressed_size"):
        empty = metadata.uncompressed_size == 0
    else:
        empty = len(payload) == 0
    return EntryFacts((KeyedMessage(key, empty),), False, chunk, metadata.producer_name)


def kept_bits(entry: bytes | memoryview) -> list[int] | None:
    """The MESSAGE ``ack_set`` of a compacted batch: a bit (in signed 64-bit words, as Java's
    ``BitSet``) for each message the compacted view keeps, so a client skips the compacted-out places
    (the official C++ client delivers them as empty messages otherwise); None if not a batch."""
    facts = entry_facts(entry)
    if not facts.batch:
        return None
    words = [0] * ((len(facts.messages) + 63) // 64)
    for index, message in enumerate(facts.messages):
        if message.key is not None and not message.empty:
            words[index // 64] |= 1 << (index % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def rebatch(entry: bytes | memoryview, kept: frozenset[int]) -> bytes:
    """The batch entry with only the messages at ``kept`` indexes; the others become empty and
    ``compacted_out``. The broker entry metadata in front is kept as it was; the producer's part gets
    its new uncompressed size and a new checksum (compressed again with the batch's codec)."""
    view = memoryview(entry)
    _, headers_and_payload = split_entry_metadata(view)
    prefix = bytes(view[: len(view) - len(headers_and_payload)])
    metadata, payload = parse_metadata(headers_and_payload)
    body = _uncompressed(metadata, payload)
    messages: list[tuple[wire.SingleMessageMetadata, bytes]] = []
    for index, (single, message) in enumerate(iter_batch(body, metadata.num_messages_in_batch)):
        if index in kept:
            messages.append((single, bytes(message)))
        else:
            messages.append((wire.SingleMessageMetadata(compacted_out=True), b""))
    new_body = encode_batch(messages)
    new_metadata = wire.MessageMetadata()
    new_metadata.CopyFrom(metadata)
    new_metadata.uncompressed_size = len(new_body)
    return prefix + encode_headers_and_payload(new_metadata, compress(metadata.compression, new_body))


def _uncompressed(metadata: wire.MessageMetadata, payload: memoryview) -> bytes | memoryview:
    if metadata.compression == wire.NONE:
        return payload
    return decompress(metadata.compression, payload, metadata.uncompressed_size)
