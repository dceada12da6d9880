"""Stored entries as a producer makes them (single messages, batches, chunks), for compaction tests."""

from __future__ import annotations

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.compression import compress
from magnetar.protocol.entry import prepend_entry_metadata
from magnetar.protocol.headers import encode_headers_and_payload


def _metadata(producer: str, sequence_id: int) -> wire.MessageMetadata:
    return wire.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=1)


def single(key: str | None, payload: bytes, *, producer: str = "p", sequence_id: int = 0) -> bytes:
    metadata = _metadata(producer, sequence_id)
    if key is not None:
        metadata.partition_key = key
    return encode_headers_and_payload(metadata, payload)


def batch(
    messages: list[tuple[str | None, bytes]],
    *,
    compression: int = wire.NONE,
    producer: str = "p",
    sequence_id: int = 0,
    entry_metadata: bool = False,
) -> bytes:
    singles = []
    for key, payload in messages:
        one = wire.SingleMessageMetadata()
        if key is not None:
            one.partition_key = key
        singles.append((one, payload))
    body = encode_batch(singles)
    metadata = _metadata(producer, sequence_id)
    metadata.num_messages_in_batch = len(messages)
    metadata.compression = compression  # type: ignore[assignment]
    metadata.uncompressed_size = len(body)
    data = encode_headers_and_payload(metadata, compress(compression, body))
    if entry_metadata:
        return bytes(prepend_entry_metadata(wire.BrokerEntryMetadata(broker_timestamp=5, index=9), data))
    return data


def chunk(
    key: str | None, part: bytes, chunk_id: int, num_chunks: int, uuid: str, *, producer: str = "p"
) -> bytes:
    metadata = _metadata(producer, 0)
    if key is not None:
        metadata.partition_key = key
    metadata.uuid = uuid
    metadata.chunk_id = chunk_id
    metadata.num_chunks_from_msg = num_chunks
    metadata.total_chunk_msg_size = len(part) * num_chunks
    return encode_headers_and_payload(metadata, part)
