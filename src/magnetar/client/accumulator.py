"""Turning application messages into what one SEND carries (no I/O).

``OutgoingMessage`` is one ``send()``; ``build_single`` makes its metadata and payload,
``BatchAccumulator`` gathers many into one batch entry (``[u32][SingleMessageMetadata][payload]``
repeated, compressed as a whole), full at ``max_messages`` or ``max_bytes``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import cast

from magnetar.client.compression import CompressionType, compress
from magnetar.client.message import MessageId
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.batch import encode_batch


@dataclass(slots=True)
class OutgoingMessage:
    """One message handed to ``send``: what it says and the future its sender waits on."""

    payload: bytes
    properties: dict[str, str] | None = None
    partition_key: str | None = None
    ordering_key: bytes | None = None
    event_timestamp: int | None = None
    sequence_id: int | None = None
    replication_clusters: list[str] | None = None
    disable_replication: bool = False
    deliver_at: int | None = None
    future: asyncio.Future[MessageId] | None = field(default=None, repr=False)


def _set_message_fields(
    target: wire.MessageMetadata | wire.SingleMessageMetadata, msg: OutgoingMessage
) -> None:
    """The fields a message's own metadata and a batch member's header both carry."""
    if msg.properties:
        target.properties.extend(wire.KeyValue(key=str(k), value=str(v)) for k, v in msg.properties.items())
    if msg.partition_key is not None:
        target.partition_key = msg.partition_key
    if msg.ordering_key is not None:
        target.ordering_key = msg.ordering_key
    if msg.event_timestamp:
        target.event_time = msg.event_timestamp


def build_metadata(
    msg: OutgoingMessage, producer_name: str, sequence_id: int, publish_time: int
) -> wire.MessageMetadata:
    """Metadata of a message sent on its own (not batched)."""
    meta = wire.MessageMetadata(
        producer_name=producer_name, sequence_id=sequence_id, publish_time=publish_time
    )
    _set_message_fields(meta, msg)
    if msg.replication_clusters:
        meta.replicate_to.extend(msg.replication_clusters)
    if msg.disable_replication:
        meta.replicate_to.append("__local__")
    if msg.deliver_at is not None:
        meta.deliver_at_time = msg.deliver_at
    return meta


def single_metadata(msg: OutgoingMessage, sequence_id: int) -> wire.SingleMessageMetadata:
    """The per-message header inside a batch."""
    single = wire.SingleMessageMetadata(payload_size=len(msg.payload), sequence_id=sequence_id)
    _set_message_fields(single, msg)
    return single


def apply_compression(meta: wire.MessageMetadata, kind: int, payload: bytes) -> bytes:
    """Compress ``payload`` and record the codec and original size in ``meta``."""
    if kind == CompressionType.NONE:
        return payload
    meta.compression = cast("wire.CompressionType.ValueType", kind)  # CompressionType's values are the wire's
    meta.uncompressed_size = len(payload)
    return compress(kind, payload)


@dataclass(slots=True)
class BuiltBatch:
    """One batch ready to send: its metadata, (compressed) payload and messages in order."""

    metadata: wire.MessageMetadata
    payload: bytes
    messages: list[OutgoingMessage]
    sequence_ids: list[int]

    @property
    def first_sequence_id(self) -> int:
        return self.sequence_ids[0]

    @property
    def last_sequence_id(self) -> int:
        return self.sequence_ids[-1]


class BatchAccumulator:
    """Messages waiting to be sent together as one entry."""

    def __init__(self, max_messages: int = 1000, max_bytes: int = 128 * 1024) -> None:
        self.max_messages = max(1, max_messages)
        self.max_bytes = max_bytes
        self._messages: list[OutgoingMessage] = []
        self._sequence_ids: list[int] = []
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def has_room_for(self, msg: OutgoingMessage) -> bool:
        """Whether ``msg`` fits; an empty batch takes any message."""
        if not self._messages:
            return True
        if len(self._messages) >= self.max_messages:
            return False
        return self.max_bytes <= 0 or self._bytes + len(msg.payload) <= self.max_bytes

    def add(self, msg: OutgoingMessage, sequence_id: int) -> bool:
        """Add a message; True when the batch is now full and should be sent."""
        self._messages.append(msg)
        self._sequence_ids.append(sequence_id)
        self._bytes += len(msg.payload)
        return self.is_full

    @property
    def is_full(self) -> bool:
        return len(self._messages) >= self.max_messages or (0 < self.max_bytes <= self._bytes)

    def build(self, producer_name: str, publish_time: int, compression: int) -> BuiltBatch | None:
        """Everything added so far as one batch (None when empty); the accumulator starts over."""
        if not self._messages:
            return None
        messages, sequence_ids = self._messages, self._sequence_ids
        self._messages, self._sequence_ids, self._bytes = [], [], 0
        payload = encode_batch(
            [(single_metadata(m, seq), m.payload) for m, seq in zip(messages, sequence_ids, strict=True)]
        )
        meta = wire.MessageMetadata(
            producer_name=producer_name,
            sequence_id=sequence_ids[0],
            publish_time=publish_time,
            num_messages_in_batch=len(messages),
        )
        if len(messages) > 1:
            meta.highest_sequence_id = sequence_ids[-1]
        payload = apply_compression(meta, compression, payload)
        return BuiltBatch(meta, payload, messages, sequence_ids)
