"""MQTT messages as Pulsar messages and back: the payload untouched, MQTT 5 User Properties as
the Pulsar message's properties (in order, duplicates kept: both allow them).

What an MQTT PUBLISH becomes is what a Pulsar producer would send: metadata with the producer
name and sequence id deduplication reads, the publish time, the properties; the CRC32C over
them (``encode_headers_and_payload``). A stored entry goes the other way: a batch is taken apart
into its messages and a compressed one decompressed, since an MQTT subscriber gets one PUBLISH
per message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

from magnetar.broker.entries import DispatchEntry
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.batch import iter_batch
from magnetar.protocol.compression import DecompressionError, decompress
from magnetar.protocol.headers import encode_headers_and_payload, parse_metadata

log = logging.getLogger(__name__)


def to_pulsar(
    payload: bytes, user_properties: Sequence[tuple[str, str]], producer: str, sequence_id: int, now_ms: int
) -> tuple[wire.MessageMetadata, bytes]:
    """The metadata and the producer's bytes of an MQTT message published at ``now_ms``."""
    metadata = wire.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=now_ms)
    for key, value in user_properties:
        metadata.properties.add(key=key, value=value)
    return metadata, encode_headers_and_payload(metadata, payload)


class Outgoing(NamedTuple):
    """One message of a stored entry, as an MQTT subscriber gets it."""

    payload: bytes
    properties: tuple[tuple[str, str], ...]


def from_entry(entry: DispatchEntry) -> list[Outgoing] | None:
    """The messages of ``entry``; None for one an MQTT subscriber cannot be sent (a chunk of a
    chunked message, bytes that do not read as a message)."""
    metadata = entry.metadata
    if metadata is None or metadata.HasField("chunk_id") or metadata.HasField("uuid"):
        return None
    try:
        _, body = parse_metadata(entry.payload_for(False))
        if metadata.compression:
            data: bytes | memoryview = decompress(metadata.compression, body, metadata.uncompressed_size)
        else:
            data = body
        if not metadata.HasField("num_messages_in_batch"):
            return [Outgoing(bytes(data), _pairs(metadata.properties))]
        return [
            Outgoing(bytes(payload), _pairs(single.properties))
            for single, payload in iter_batch(data, metadata.num_messages_in_batch)
        ]
    except (ProtocolError, DecompressionError) as exc:
        log.warning("entry %s cannot go to MQTT subscribers: %s", entry.position, exc)
        return None


def _pairs(properties: Sequence[wire.KeyValue]) -> tuple[tuple[str, str], ...]:
    return tuple((kv.key, kv.value) for kv in properties)
