"""From a MESSAGE command and its bytes to application messages (no I/O).

``parse_entry`` checks the checksum and splits broker entry metadata, message metadata and
the (possibly compressed) payload. ``expand`` decompresses and turns the entry into
``Message`` objects: one, or one per batch member still unacknowledged per the ack set.
Chunks are left to the ``ChunkAssembler``; ``chunk_of`` describes one for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from magnetar.client.acks import ack_set_bits
from magnetar.client.chunks import Chunk
from magnetar.client.compression import decompress
from magnetar.client.message import Message, MessageId
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.batch import iter_batch
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.headers import parse_metadata, verify_checksum
from magnetar.protocol.message_id import to_signed


@dataclass(slots=True)
class Entry:
    """One received entry, parsed but not yet decompressed."""

    message_id: MessageId
    metadata: wire.MessageMetadata
    payload: memoryview
    redelivery_count: int
    broker_metadata: wire.BrokerEntryMetadata | None
    unacked: set[int] | None  # batch indexes still to deliver (None: all)

    @property
    def is_batch(self) -> bool:
        return self.metadata.HasField("num_messages_in_batch")

    @property
    def is_chunk(self) -> bool:
        return self.metadata.num_chunks_from_msg > 1 and not self.is_batch

    @property
    def batch_size(self) -> int:
        return self.metadata.num_messages_in_batch if self.is_batch else 1


def parse_entry(command: wire.CommandMessage, payload: memoryview, partition: int, topic: str) -> Entry:
    """Raises ChecksumMismatch or ProtocolError for corrupt bytes."""
    broker_meta, rest = split_entry_metadata(payload)
    verify_checksum(rest)
    metadata, body = parse_metadata(rest)
    data = command.message_id
    msg_id = MessageId(partition, to_signed(data.ledger_id), to_signed(data.entry_id), topic=topic)
    return Entry(
        msg_id, metadata, body, command.redelivery_count, broker_meta, ack_set_bits(list(command.ack_set))
    )


def counted_messages(payload: memoryview) -> int:
    """How many messages the broker charged to our permits for an entry we cannot use: the batch
    size its metadata gives, checksum or not; 1 when not even the metadata parses."""
    try:
        _, rest = split_entry_metadata(payload)
        metadata, _ = parse_metadata(rest)
    except ProtocolError:
        return 1
    return max(metadata.num_messages_in_batch, 1) if metadata.HasField("num_messages_in_batch") else 1


def chunk_of(entry: Entry) -> Chunk:
    meta = entry.metadata
    return Chunk(
        uuid=meta.uuid,
        chunk_id=meta.chunk_id,
        num_chunks=meta.num_chunks_from_msg,
        total_size=meta.total_chunk_msg_size,
        message_id=entry.message_id,
        payload=entry.payload,
        publish_time=meta.publish_time,
    )


def uncompressed_payload(metadata: wire.MessageMetadata, payload: bytes | bytearray | memoryview) -> bytes:
    """The payload decoded per ``metadata.compression`` (raises DecompressionError)."""
    if not metadata.compression:
        return payload if isinstance(payload, bytes) else bytes(payload)
    return decompress(metadata.compression, payload, metadata.uncompressed_size)


def payload_view(metadata: wire.MessageMetadata, payload: memoryview) -> bytes | memoryview:
    """As ``uncompressed_payload``, but an uncompressed payload stays the view of the received
    frame it is: for readers that copy it once themselves (columns, joined into an Arrow buffer)."""
    if not metadata.compression:
        return payload
    return decompress(metadata.compression, payload, metadata.uncompressed_size)


class _EntryFields(TypedDict):
    """What every message of an entry shares (``Message``'s keyword arguments)."""

    topic: str
    publish_time: int
    producer_name: str
    redelivery_count: int
    schema_version: bytes | None
    broker_publish_time: int | None
    cnx_generation: int
    replicated_from: str | None


def expand(
    entry: Entry, data: bytes, topic: str, generation: int, message_id: MessageId | None = None
) -> list[Message]:
    """The application messages of an entry whose payload ``data`` is already decompressed."""
    meta = entry.metadata
    broker = entry.broker_metadata
    index = broker.index if broker is not None and broker.HasField("index") else None
    broker_time = (
        broker.broker_timestamp if broker is not None and broker.HasField("broker_timestamp") else None
    )
    common = _EntryFields(
        topic=topic,
        publish_time=meta.publish_time,
        producer_name=meta.producer_name,
        redelivery_count=entry.redelivery_count,
        schema_version=meta.schema_version if meta.HasField("schema_version") else None,
        broker_publish_time=broker_time,
        cnx_generation=generation,
        replicated_from=meta.replicated_from if meta.HasField("replicated_from") else None,
    )
    if not entry.is_batch:
        return [
            Message(
                data,
                message_id or entry.message_id,
                properties={kv.key: kv.value for kv in meta.properties},
                partition_key=meta.partition_key if meta.HasField("partition_key") else None,
                ordering_key=meta.ordering_key if meta.HasField("ordering_key") else None,
                event_time=meta.event_time,
                index=index,
                **common,
            )
        ]
    size = meta.num_messages_in_batch
    base = entry.message_id
    out = []
    for i, (single, payload) in enumerate(iter_batch(data, size)):
        if entry.unacked is not None and i not in entry.unacked:
            continue
        if single.compacted_out:
            continue
        out.append(
            Message(
                bytes(payload),
                MessageId(base.partition(), base.ledger_id(), base.entry_id(), i, size, topic),
                properties={kv.key: kv.value for kv in single.properties},
                partition_key=single.partition_key if single.HasField("partition_key") else None,
                ordering_key=single.ordering_key if single.HasField("ordering_key") else None,
                event_time=single.event_time,
                index=index - size + i + 1 if index is not None else None,
                **common,
            )
        )
    return out
