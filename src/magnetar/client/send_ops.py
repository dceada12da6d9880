"""The SENDs that carry a producer's messages: one per message, one per batch, or, for a large
message with chunking, one per chunk (compressed first, then split into chunks that fit the
broker's ``max_message_size``; every chunk carries the message's sequence id)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from magnetar.client.accumulator import OutgoingMessage, apply_compression, build_metadata
from magnetar.client.errors import AlreadyClosed, MessageTooBig
from magnetar.client.message import MessageId
from magnetar.protocol import commands
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.frames import FRAME_OVERHEAD
from magnetar.protocol.headers import encode_headers_and_payload, metadata_span

#: Room kept for the chunk fields added to a chunk's metadata.
CHUNK_METADATA_ROOM = 64

#: When a SEND made now times out (``time.monotonic()``; inf without a send timeout).
Deadline = Callable[[], float]


def stored_size_limit(max_message_size: int, is_chunk: bool) -> int:
    """The most metadata + payload bytes a broker takes in one SEND of a stored message, as it
    counts them: ``max_message_size``, but a chunk is bounded by the frame limit alone (a chunk
    sized to the limit by its producer grows by its ``replicated_from`` when a geo-replicator
    copies it)."""
    return max_message_size + FRAME_OVERHEAD if is_chunk else max_message_size


def stored_too_big(headers_and_payload: bytes, max_message_size: int, is_chunk: bool) -> MessageTooBig | None:
    """The error for a stored message (metadata and payload, as the broker counts them) over
    ``stored_size_limit``; None when it fits."""
    size = len(headers_and_payload) - metadata_span(headers_and_payload)[0]
    limit = stored_size_limit(max_message_size, is_chunk)
    if size <= limit:
        return None
    return MessageTooBig(f"message of {size} bytes exceeds the broker's limit of {limit}")


@dataclass(slots=True)
class ChunkGroup:
    """The chunks of one message: ids collected as receipts come back."""

    num_chunks: int
    future: asyncio.Future
    ids: list[MessageId] = field(default_factory=list)


@dataclass(slots=True)
class SendOp:
    """One SEND on the wire: a message, a batch, or one chunk."""

    sequence_id: int
    command: wire.BaseCommand
    headers_and_payload: bytes
    messages: list[OutgoingMessage]
    deadline: float
    chunk: ChunkGroup | None = None
    batch: bool = False

    @property
    def num_messages(self) -> int:
        return len(self.messages)


def batch_op(producer_id: int, built, headers_and_payload: bytes, deadline: float) -> SendOp:
    """The SEND of a batch the accumulator ``built`` (encoded as ``headers_and_payload``)."""
    send = wire.CommandSend(
        producer_id=producer_id,
        sequence_id=built.first_sequence_id,
        num_messages=len(built.messages),
    )
    if len(built.messages) > 1:
        send.highest_sequence_id = built.last_sequence_id
    return SendOp(
        built.first_sequence_id,
        commands.wrap(send),
        headers_and_payload,
        built.messages,
        deadline,
        batch=True,
    )


class MessageOps:
    """Makes the SENDs of single messages for one producer."""

    def __init__(self, producer_id: int, topic: str, compression_type: int, chunking_enabled: bool) -> None:
        self._producer_id = producer_id
        self._compression_type = compression_type
        #: Chunking is for persistent topics only (as Pulsar's clients).
        self._chunking = chunking_enabled and topic.startswith("persistent://")

    def for_message(
        self,
        msg: OutgoingMessage,
        sequence_id: int,
        producer_name: str,
        max_size: int,
        now_ms: int,
        deadline: Deadline,
    ) -> Iterator[SendOp]:
        """The SEND (or, for a large message with chunking, the SENDs) carrying one message;
        MessageTooBig (at once, not when iterated) when it cannot be sent."""
        meta = build_metadata(msg, producer_name, sequence_id, now_ms)
        payload = apply_compression(meta, self._compression_type, msg.payload)
        if not self._chunking:
            if meta.ByteSize() + len(payload) > max_size:
                raise MessageTooBig(
                    f"message of {len(payload)} bytes exceeds the broker's limit of {max_size} "
                    "(enable chunking to send it)"
                )
            return iter([self._single(meta, payload, msg, sequence_id, deadline())])
        chunk_size = max_size - meta.ByteSize() - CHUNK_METADATA_ROOM - len(producer_name)
        if chunk_size <= 0:
            raise MessageTooBig(f"message metadata alone exceeds the broker's limit of {max_size}")
        if len(payload) <= chunk_size:
            return iter([self._single(meta, payload, msg, sequence_id, deadline())])
        return self._chunks(meta, payload, msg, sequence_id, producer_name, chunk_size, deadline)

    def _single(
        self, meta: wire.MessageMetadata, payload: bytes, msg: OutgoingMessage, seq: int, deadline: float
    ) -> SendOp:
        send = wire.CommandSend(producer_id=self._producer_id, sequence_id=seq, num_messages=1)
        return SendOp(seq, commands.wrap(send), encode_headers_and_payload(meta, payload), [msg], deadline)

    def _chunks(
        self,
        meta: wire.MessageMetadata,
        payload: bytes,
        msg: OutgoingMessage,
        seq: int,
        producer_name: str,
        chunk_size: int,
        deadline: Deadline,
    ) -> Iterator[SendOp]:
        num_chunks = -(-len(payload) // chunk_size)
        assert msg.future is not None
        group = ChunkGroup(num_chunks, msg.future)
        meta.uuid = f"{producer_name}-{seq}"
        meta.num_chunks_from_msg = num_chunks
        meta.total_chunk_msg_size = len(payload)
        view = memoryview(payload)
        expires = deadline()
        for chunk_id in range(num_chunks):
            meta.chunk_id = chunk_id
            part = view[chunk_id * chunk_size : (chunk_id + 1) * chunk_size]
            send = wire.CommandSend(
                producer_id=self._producer_id, sequence_id=seq, num_messages=1, is_chunk=True
            )
            # Every chunk op names the message so a failure fails it once; only the last completes it.
            yield SendOp(
                seq, commands.wrap(send), encode_headers_and_payload(meta, part), [msg], expires, group
            )


def outgoing_message(
    content: bytes | bytearray | memoryview,
    *,
    properties: dict[str, str] | None,
    partition_key: str | None,
    ordering_key: bytes | str | None,
    sequence_id: int | None,
    replication_clusters: list[str] | None,
    disable_replication: bool,
    event_timestamp: int | None,
    deliver_at: int | None,
    deliver_after: Any,
) -> OutgoingMessage:
    """The message ``Producer.send_async``'s arguments describe (``deliver_after``: seconds or a
    timedelta from now, which wins over ``deliver_at``)."""
    if deliver_after is not None:
        seconds = deliver_after.total_seconds() if hasattr(deliver_after, "total_seconds") else deliver_after
        deliver_at = int(time.time() * 1000 + seconds * 1000)
    if isinstance(ordering_key, str):
        ordering_key = ordering_key.encode()
    return OutgoingMessage(
        payload=bytes(content) if not isinstance(content, bytes) else content,
        properties=properties,
        partition_key=partition_key,
        ordering_key=ordering_key,
        event_timestamp=event_timestamp,
        sequence_id=sequence_id,
        replication_clusters=replication_clusters,
        disable_replication=disable_replication,
        deliver_at=deliver_at,
    )


#: ``callback(error, message_id)`` of an asyncio ``send_async``: (None, the id) or (the error, None).
SendCallback = Callable[[BaseException | None, MessageId | None], None]


def callback_adapter(callback: SendCallback) -> Callable[[asyncio.Future[MessageId]], None]:
    """A done-callback calling ``callback(result, message_id)``: (None, the id) or (the error, None)."""

    def done(future: asyncio.Future[MessageId]) -> None:
        if future.cancelled():
            callback(AlreadyClosed("send cancelled"), None)
        elif future.exception() is not None:
            callback(future.exception(), None)
        else:
            callback(None, future.result())

    return done
