"""The asyncio producer: sequence ids, batching, compression, chunking, receipts, resend on reconnect.

Every SEND waits in ``_pending`` (in send order) until its SEND_RECEIPT, which the broker
returns in order. After a reconnect every pending SEND is written again, in order, with the
same sequence ids. A large message with ``chunking_enabled`` is compressed first, then split
into chunks that fit the broker's ``max_message_size``; all chunks share the message's
sequence id and the send completes once, on the last chunk's receipt, with a
``ChunkMessageId`` naming the first and the last chunk.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.client.accumulator import (
    BatchAccumulator,
    OutgoingMessage,
    apply_compression,
    build_metadata,
)
from magnetar.client.compression import CompressionType
from magnetar.client.connection import DEFAULT_MAX_MESSAGE_SIZE
from magnetar.client.errors import (
    AlreadyClosed,
    ClientError,
    ConnectionClosed,
    InvalidConfiguration,
    MessageTooBig,
    ProducerBlockedQuotaExceededException,
    ProducerQueueIsFull,
    Timeout,
    server_error,
)
from magnetar.client.handler import HandlerBase, State
from magnetar.client.message import ChunkMessageId, MessageId
from magnetar.protocol import commands
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.headers import encode_headers_and_payload, metadata_span

if TYPE_CHECKING:
    from magnetar.client.client import Client
    from magnetar.client.connection import Connection

log = logging.getLogger(__name__)

#: Room kept for the chunk fields added to a chunk's metadata.
_CHUNK_METADATA_ROOM = 64


@dataclass(slots=True)
class _ChunkGroup:
    """The chunks of one message: ids collected as receipts come back."""

    num_chunks: int
    future: asyncio.Future
    ids: list[MessageId] = field(default_factory=list)


@dataclass(slots=True)
class _SendOp:
    """One SEND on the wire: a message, a batch, or one chunk."""

    sequence_id: int
    command: wire.BaseCommand
    headers_and_payload: bytes
    messages: list[OutgoingMessage]
    deadline: float
    chunk: _ChunkGroup | None = None
    batch: bool = False

    @property
    def num_messages(self) -> int:
        return len(self.messages)


@dataclass(slots=True)
class ProducerConfig:
    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_millis: int = 30_000
    compression_type: int = CompressionType.NONE
    max_pending_messages: int = 1000
    block_if_queue_full: bool = False
    batching_enabled: bool = False
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: int = 10
    chunking_enabled: bool = False
    properties: dict[str, str] | None = None
    access_mode: int = wire.Shared

    def validate(self) -> None:
        if self.batching_enabled and self.chunking_enabled:
            raise InvalidConfiguration(
                "batching and chunking cannot be enabled together: create the producer with "
                "batching_enabled=False to send chunked messages"
            )
        self.compression_type = CompressionType(int(self.compression_type))
        self.access_mode = int(self.access_mode)


class Producer(HandlerBase):
    """Publishes to one topic (or one partition of a partitioned topic)."""

    def __init__(self, client: Client, topic: str, config: ProducerConfig, partition: int = -1) -> None:
        config.validate()
        super().__init__(client, topic)
        self.config = config
        self.partition = partition
        self.producer_id = client.new_producer_id()
        self._producer_name = config.producer_name
        self._user_named = config.producer_name is not None
        self._next_sequence_id = (
            config.initial_sequence_id + 1 if config.initial_sequence_id is not None else 0
        )
        self._last_sequence_id_published = (
            config.initial_sequence_id if config.initial_sequence_id is not None else -1
        )
        self._epoch = 0
        self._pending: collections.deque[_SendOp] = collections.deque()
        #: SENDs written so far: a send that wrote none (one more message in the open batch)
        #: has nothing to wait for on the socket.
        self._pushes = 0
        self._pending_messages = 0
        self._space = asyncio.Event()
        self._space.set()
        self._send_lock = asyncio.Lock()
        self._batch = BatchAccumulator(
            config.batching_max_messages, config.batching_max_allowed_size_in_bytes
        )
        self._batch_timer: asyncio.TimerHandle | None = None
        self._timeout_task: asyncio.Task | None = None
        #: The broker's limit as the last connection announced it: messages queued while
        #: disconnected are split (or refused) by it, not by the 5 MiB default.
        self._max_message_size = DEFAULT_MAX_MESSAGE_SIZE

    # --- accessors, as the official client's ----------------------------------------------------
    def producer_name(self) -> str:
        return self._producer_name or ""

    def last_sequence_id(self) -> int:
        return self._last_sequence_id_published

    @property
    def max_message_size(self) -> int:
        return self.cnx.max_message_size if self.cnx is not None else self._max_message_size

    # --- connecting -------------------------------------------------------------------------------
    async def _connection_opened(self, cnx: Connection) -> None:
        cnx.register_producer(self.producer_id, self)
        body = wire.CommandProducer(
            topic=self._topic,
            producer_id=self.producer_id,
            request_id=0,
            epoch=self._epoch,
            user_provided_producer_name=self._user_named,
            producer_access_mode=self.config.access_mode,
        )
        if self._producer_name:
            body.producer_name = self._producer_name
        for key, value in (self.config.properties or {}).items():
            body.metadata.add(key=key, value=value)
        self._epoch += 1
        answer = await self._register(cnx, body, lambda: cnx.remove_producer(self.producer_id))
        self._producer_name = answer.producer_name
        if (
            not self._created
            and self.config.initial_sequence_id is None
            and answer.HasField("last_sequence_id")
            and answer.last_sequence_id >= 0
        ):
            self._last_sequence_id_published = answer.last_sequence_id
            self._next_sequence_id = answer.last_sequence_id + 1
        if self._timeout_task is None and self.config.send_timeout_millis > 0:
            self._timeout_task = asyncio.get_running_loop().create_task(self._send_timeout_loop())
        self._max_message_size = cnx.max_message_size
        self._drop_too_big(cnx.max_message_size)
        # Resend what never got a receipt, in order, before anything new (no await until READY).
        for op in self._pending:
            cnx.send_command(op.command, op.headers_and_payload)

    def _drop_too_big(self, max_size: int) -> None:
        """Fail the queued messages this broker's limit refuses (it may be lower than the last
        one's): sent anyway, each would close the connection again, for ever."""
        for op in [op for op in self._pending if op.chunk is None]:
            # metadata and payload, as the broker counts them
            size = len(op.headers_and_payload) - metadata_span(op.headers_and_payload)[0]
            if size > max_size:
                self._drop_message_of(
                    op.sequence_id,
                    MessageTooBig(f"message of {size} bytes exceeds the broker's limit of {max_size}"),
                )

    # --- sending ----------------------------------------------------------------------------------
    async def send(self, content: bytes, **kwargs: Any) -> MessageId:
        """Publish and wait for the broker's receipt; returns the message id."""
        future = await self.send_async(content, **kwargs)
        return await future

    async def send_async(
        self,
        content: bytes,
        callback: Any = None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: bytes | str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: Any = None,
    ) -> asyncio.Future:
        """Queue a message; the returned future resolves to its MessageId on receipt.

        ``callback(result, message_id)`` (``result`` an exception or None) runs on completion.
        Waits for room when ``block_if_queue_full``, else raises ProducerQueueIsFull.
        """
        if deliver_after is not None:
            seconds = (
                deliver_after.total_seconds() if hasattr(deliver_after, "total_seconds") else deliver_after
            )
            deliver_at = int(time.time() * 1000 + seconds * 1000)
        if isinstance(ordering_key, str):
            ordering_key = ordering_key.encode()
        msg = OutgoingMessage(
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
        future = await self._enqueue(msg)
        if callback is not None:
            future.add_done_callback(_callback_adapter(callback))
        return future

    async def _enqueue(self, msg: OutgoingMessage) -> asyncio.Future:
        # One message at a time per producer, in call order: a chunked message is written chunk
        # by chunk (waiting for the socket between chunks) and nothing may slip in between.
        async with self._send_lock:
            self._check_open()
            limit = self.config.max_pending_messages
            if limit > 0 and self._pending_messages >= limit:
                await self._reserve_slot()
                self._check_open()
            pushes = self._pushes
            msg.future = asyncio.get_running_loop().create_future()
            if msg.sequence_id is None:
                sequence_id = self._next_sequence_id
                self._next_sequence_id += 1
            else:
                sequence_id = msg.sequence_id
                self._next_sequence_id = max(self._next_sequence_id, sequence_id + 1)
            self._pending_messages += 1
            try:
                if self.config.batching_enabled and msg.deliver_at is None:
                    self._add_to_batch(msg, sequence_id)
                else:
                    self._flush_batch()
                    for op in self._ops_for(msg, sequence_id):
                        if msg.future.done():
                            break  # failed (timeout, close) while its chunks were being written
                        self._push(op)
                        if op.chunk is not None:
                            # Let other producers on the connection take turns with their chunks.
                            await asyncio.sleep(0)
                            await self._drain()
            except ClientError as exc:
                self._fail_messages([msg], exc)
            if self._pushes != pushes:
                await self._drain()
            return msg.future

    async def _drain(self) -> None:
        if self.state is State.READY and self.cnx is not None:
            with contextlib.suppress(ConnectionClosed):
                await self.cnx.drain()

    def _check_open(self) -> None:
        if self.state in (State.CLOSING, State.CLOSED, State.FAILED):
            raise AlreadyClosed(f"{self.name} is closed")

    async def _reserve_slot(self) -> None:
        limit = self.config.max_pending_messages
        while limit > 0 and self._pending_messages >= limit:
            if not self.config.block_if_queue_full:
                raise ProducerQueueIsFull(f"{self.name} has {self._pending_messages} messages pending")
            self._space.clear()
            await self._space.wait()
            self._check_open()

    def _add_to_batch(self, msg: OutgoingMessage, sequence_id: int) -> None:
        if not self._batch.has_room_for(msg):
            self._flush_batch()
        if self._batch.add(msg, sequence_id):
            self._flush_batch()
        elif len(self._batch) == 1:
            delay = self.config.batching_max_publish_delay_ms / 1000
            self._batch_timer = asyncio.get_running_loop().call_later(delay, self._flush_batch)

    def _flush_batch(self) -> None:
        """Send whatever the batch holds now."""
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        built = self._batch.build(self.producer_name(), _now_ms(), self.config.compression_type)
        if built is None:
            return
        headers_and_payload = encode_headers_and_payload(built.metadata, built.payload)
        if len(headers_and_payload) > self.max_message_size:
            self._fail_messages(built.messages, MessageTooBig(f"batch of {len(headers_and_payload)} bytes"))
            return
        send = wire.CommandSend(
            producer_id=self.producer_id,
            sequence_id=built.first_sequence_id,
            num_messages=len(built.messages),
        )
        if len(built.messages) > 1:
            send.highest_sequence_id = built.last_sequence_id
        self._push(
            _SendOp(
                built.first_sequence_id,
                commands.wrap(send),
                headers_and_payload,
                built.messages,
                self._deadline(),
                batch=True,
            )
        )

    def _ops_for(self, msg: OutgoingMessage, sequence_id: int) -> Iterator[_SendOp]:
        """The SEND (or, for a large message with chunking, the SENDs) carrying one message."""
        meta = build_metadata(msg, self.producer_name(), sequence_id, _now_ms())
        payload = apply_compression(meta, self.config.compression_type, msg.payload)
        max_size = self.max_message_size
        if not self.config.chunking_enabled or not self._topic.startswith("persistent://"):
            if meta.ByteSize() + len(payload) > max_size:
                raise MessageTooBig(
                    f"message of {len(payload)} bytes exceeds the broker's limit of {max_size} "
                    "(enable chunking to send it)"
                )
            return iter([self._single_op(meta, payload, msg, sequence_id)])
        chunk_size = max_size - meta.ByteSize() - _CHUNK_METADATA_ROOM - len(self.producer_name())
        if chunk_size <= 0:
            raise MessageTooBig(f"message metadata alone exceeds the broker's limit of {max_size}")
        if len(payload) <= chunk_size:
            return iter([self._single_op(meta, payload, msg, sequence_id)])
        return self._chunk_ops(meta, payload, msg, sequence_id, chunk_size)

    def _single_op(
        self, meta: wire.MessageMetadata, payload: bytes, msg: OutgoingMessage, seq: int
    ) -> _SendOp:
        send = wire.CommandSend(producer_id=self.producer_id, sequence_id=seq, num_messages=1)
        headers_and_payload = encode_headers_and_payload(meta, payload)
        return _SendOp(seq, commands.wrap(send), headers_and_payload, [msg], self._deadline())

    def _chunk_ops(
        self, meta: wire.MessageMetadata, payload: bytes, msg: OutgoingMessage, seq: int, chunk_size: int
    ) -> Iterator[_SendOp]:
        num_chunks = -(-len(payload) // chunk_size)
        assert msg.future is not None
        group = _ChunkGroup(num_chunks, msg.future)
        meta.uuid = f"{self.producer_name()}-{seq}"
        meta.num_chunks_from_msg = num_chunks
        meta.total_chunk_msg_size = len(payload)
        view = memoryview(payload)
        deadline = self._deadline()
        for chunk_id in range(num_chunks):
            meta.chunk_id = chunk_id
            part = view[chunk_id * chunk_size : (chunk_id + 1) * chunk_size]
            send = wire.CommandSend(
                producer_id=self.producer_id, sequence_id=seq, num_messages=1, is_chunk=True
            )
            # Every chunk op names the message so a failure fails it once; only the last completes it.
            yield _SendOp(
                seq, commands.wrap(send), encode_headers_and_payload(meta, part), [msg], deadline, group
            )

    def _push(self, op: _SendOp) -> None:
        self._pending.append(op)
        self._pushes += 1
        if self.state is State.READY and self.cnx is not None:
            with contextlib.suppress(ConnectionClosed):  # else resent after the reconnect
                self.cnx.send_command(op.command, op.headers_and_payload)

    def _deadline(self) -> float:
        timeout = self.config.send_timeout_millis
        return time.monotonic() + timeout / 1000 if timeout > 0 else float("inf")

    # --- receipts ---------------------------------------------------------------------------------
    def on_send_receipt(self, cnx: Connection, receipt: wire.CommandSendReceipt) -> None:
        if cnx is not self.cnx or not self._pending:
            return
        op = self._pending[0]
        if receipt.sequence_id < op.sequence_id:
            return  # a receipt for something already timed out or failed
        if receipt.sequence_id > op.sequence_id:
            log.warning(
                "%s: receipt for %d while %d is first in line; reconnecting",
                self.name,
                receipt.sequence_id,
                op.sequence_id,
            )
            asyncio.get_running_loop().create_task(cnx.close())
            return
        self._pending.popleft()
        data = receipt.message_id
        ledger, entry = (data.ledger_id, data.entry_id) if receipt.HasField("message_id") else (-1, -1)
        self._last_sequence_id_published = max(
            self._last_sequence_id_published,
            receipt.highest_sequence_id or receipt.sequence_id,
            op.sequence_id,
        )
        self._complete(op, ledger, entry)

    def _complete(self, op: _SendOp, ledger: int, entry: int) -> None:
        topic = self._topic
        if op.chunk is not None:
            op.chunk.ids.append(MessageId(self.partition, ledger, entry, topic=topic))
            if len(op.chunk.ids) < op.chunk.num_chunks:
                return
            self._resolve(op.messages[0], ChunkMessageId(op.chunk.ids))
            return
        if op.batch:
            n = op.num_messages
            for index, msg in enumerate(op.messages):
                self._resolve(msg, MessageId(self.partition, ledger, entry, index, n, topic))
        else:
            self._resolve(op.messages[0], MessageId(self.partition, ledger, entry, topic=topic))

    def _resolve(self, msg: OutgoingMessage, msg_id: MessageId) -> None:
        self._release(1)
        if msg.future is not None and not msg.future.done():
            msg.future.set_result(msg_id)

    def on_send_error(self, cnx: Connection, error: wire.CommandSendError) -> None:
        if cnx is not self.cnx:
            return
        exc = server_error(error.error, error.message)
        if error.error == wire.ChecksumError:
            self._drop_message_of(error.sequence_id, exc)
        elif error.error == wire.TopicTerminatedError:
            self._fail_all(exc)
        else:
            log.warning("%s: send error %s; reconnecting", self.name, exc)
            asyncio.get_running_loop().create_task(cnx.close())

    def _drop_message_of(self, sequence_id: int, exc: Exception) -> None:
        """Remove every pending op of the message with this sequence id and fail it."""
        kept = collections.deque(op for op in self._pending if op.sequence_id != sequence_id)
        dropped = [op for op in self._pending if op.sequence_id == sequence_id]
        self._pending = kept
        seen: set[int] = set()
        for op in dropped:
            msgs = [m for m in op.messages if id(m) not in seen]
            seen.update(id(m) for m in msgs)
            self._fail_messages(msgs, exc)

    def _fail_messages(self, messages: list[OutgoingMessage], exc: Exception) -> None:
        for msg in messages:
            self._release(1)
            if msg.future is not None and not msg.future.done():
                msg.future.set_exception(exc)

    def _reconnect_refused(self, exc: ClientError) -> None:
        # As Pulsar's clients: a topic past a backlog quota with the producer_exception policy
        # (or whose broker's disk is full) fails the sends waiting for it; with
        # producer_request_hold they wait (to their timeout).
        if isinstance(exc, ProducerBlockedQuotaExceededException):
            log.warning(
                "%s: producer blocked (%s), failing %d pending sends", self.name, exc, len(self._pending)
            )
            self._fail_all(exc)

    def _fail_all(self, exc: Exception) -> None:
        pending, self._pending = self._pending, collections.deque()
        seen: set[int] = set()
        for op in pending:
            msgs = [m for m in op.messages if id(m) not in seen]
            seen.update(id(m) for m in msgs)
            self._fail_messages(msgs, exc)

    def _release(self, count: int) -> None:
        self._pending_messages = max(0, self._pending_messages - count)
        self._space.set()

    async def _send_timeout_loop(self) -> None:
        timeout = self.config.send_timeout_millis / 1000
        tick = min(1.0, max(0.05, timeout / 4))
        while self.state not in (State.CLOSED, State.FAILED):
            await asyncio.sleep(tick)
            if self._pending and self._pending[0].deadline <= time.monotonic():
                log.warning("%s: send timed out, failing %d pending sends", self.name, len(self._pending))
                self._fail_all(
                    Timeout(f"{self.name}: no receipt within {self.config.send_timeout_millis} ms")
                )

    # --- flush and close --------------------------------------------------------------------------
    async def flush(self) -> None:
        """Send the current batch and wait until everything sent so far is acknowledged."""
        self._flush_batch()
        futures = [m.future for op in self._pending for m in op.messages if m.future is not None]
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)

    async def close(self) -> None:
        """Flush, wait for outstanding receipts (up to the operation timeout), then close."""
        if self.state in (State.CLOSED, State.CLOSING):
            return
        if self.state is State.READY:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.flush(), self.client.operation_timeout)
        else:
            self._flush_batch()
        self.state = State.CLOSING
        self._space.set()
        self._stop_reconnecting()
        if self._timeout_task is not None:
            self._timeout_task.cancel()
        self._fail_all(AlreadyClosed(f"{self.name} closed before the broker acknowledged the message"))
        cnx = self.cnx
        if cnx is not None and not cnx.is_closed:
            with contextlib.suppress(ClientError):
                await cnx.request(wire.CommandCloseProducer(producer_id=self.producer_id, request_id=0))
            cnx.remove_producer(self.producer_id)
        self.state = State.CLOSED
        self.client.forget(self)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _callback_adapter(callback: Any):
    def done(future: asyncio.Future) -> None:
        if future.cancelled():
            callback(AlreadyClosed("send cancelled"), None)
        elif future.exception() is not None:
            callback(future.exception(), None)
        else:
            callback(None, future.result())

    return done
