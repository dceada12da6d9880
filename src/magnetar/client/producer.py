"""The asyncio producer: sequence ids, batching, compression, chunking, receipts, resend on reconnect.

Every SEND waits in ``_pending`` (``SendOpQueue``, in send order) until its SEND_RECEIPT, which
the broker returns in order. After a reconnect every pending SEND is written again, in order,
with the same sequence ids. A large message with ``chunking_enabled`` is compressed first, then
split into chunks that fit the broker's ``max_message_size``; all chunks share the message's
sequence id and the send completes once, on the last chunk's receipt, with a
``ChunkMessageId`` naming the first and the last chunk.

The parts: producer_config.py (``ProducerConfig``), send_ops.py (the SENDs of a message, a
batch, a chunked message), send_op_queue.py (the sends awaiting receipts and their messages'
futures), accumulator.py (the open batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, cast

from magnetar.client.accumulator import BatchAccumulator, OutgoingMessage
from magnetar.client.connection import DEFAULT_MAX_MESSAGE_SIZE
from magnetar.client.errors import (
    AlreadyClosed,
    ClientError,
    ConnectionClosed,
    MessageTooBig,
    ProducerBlockedQuotaExceededException,
    Timeout,
    server_error,
)
from magnetar.client.handler import HandlerBase, State
from magnetar.client.message import MessageId
from magnetar.client.producer_config import ProducerConfig
from magnetar.client.send_op_queue import SendOpQueue
from magnetar.client.send_ops import (
    MessageOps,
    SendCallback,
    SendOp,
    batch_op,
    callback_adapter,
    outgoing_message,
    stored_too_big,
)
from magnetar.protocol import commands
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.headers import encode_headers_and_payload
from magnetar.protocol.message_id import to_signed
from magnetar.protocol.topic_name import split_partition

if TYPE_CHECKING:
    from magnetar.client.connection import Connection
    from magnetar.client.services import ClientServices

__all__ = ["Producer", "ProducerConfig", "SendCallback"]

log = logging.getLogger(__name__)


class Producer(HandlerBase):
    """Publishes to one topic (or one partition of a partitioned topic)."""

    def __init__(
        self, client: ClientServices, topic: str, config: ProducerConfig, partition: int = -1
    ) -> None:
        config.validate()
        super().__init__(client, topic)
        self.config = config
        # As Pulsar's client: a partition named directly keeps its index in the ids it gives.
        self.partition = partition if partition >= 0 else split_partition(topic)[1]
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
        #: The SENDs awaiting receipts, and the messages they hold.
        self._pending = SendOpQueue()
        #: SENDs written so far: a send that wrote none (one more message in the open batch)
        #: has nothing to wait for on the socket.
        self._pushes = 0
        self._send_lock = asyncio.Lock()
        self._ops = MessageOps(self.producer_id, topic, config.compression_type, config.chunking_enabled)
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
            producer_access_mode=cast("wire.ProducerAccessMode.ValueType", self.config.access_mode),
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
        self._pending.drop_too_big(cnx.max_message_size)
        # Resend what never got a receipt, in order, before anything new (no await until READY).
        for op in self._pending:
            cnx.send_command(op.command, op.headers_and_payload)

    # --- sending ----------------------------------------------------------------------------------
    async def send(self, content: bytes, **kwargs: Any) -> MessageId:
        """Publish and wait for the broker's receipt; returns the message id."""
        future = await self.send_async(content, **kwargs)
        return await future

    async def send_async(
        self,
        content: bytes,
        callback: SendCallback | None = None,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: bytes | str | None = None,
        sequence_id: int | None = None,
        replication_clusters: list[str] | None = None,
        disable_replication: bool = False,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        deliver_after: Any = None,
    ) -> asyncio.Future[MessageId]:
        """Queue a message; the returned future resolves to its MessageId on receipt.

        ``callback(result, message_id)`` (``result`` an exception or None) runs on completion.
        Waits for room when ``block_if_queue_full``, else raises ProducerQueueIsFull.
        """
        msg = outgoing_message(
            content,
            properties=properties,
            partition_key=partition_key,
            ordering_key=ordering_key,
            sequence_id=sequence_id,
            replication_clusters=replication_clusters,
            disable_replication=disable_replication,
            event_timestamp=event_timestamp,
            deliver_at=deliver_at,
            deliver_after=deliver_after,
        )
        future = await self._enqueue(msg)
        if callback is not None:
            future.add_done_callback(callback_adapter(callback))
        return future

    async def send_stored(
        self,
        metadata: wire.MessageMetadata,
        payload: bytes | memoryview,
        *,
        sequence_id: int,
        highest_sequence_id: int | None = None,
        num_messages: int = 1,
        is_chunk: bool = False,
    ) -> asyncio.Future[MessageId]:
        """Queue one message whose metadata is built already and whose payload goes as it is: not
        batched, compressed or chunked again (a stored entry a geo-replicator copies, with its
        batch, compression and chunk fields). The caller picks the SEND's sequence ids, the ones
        the broker deduplicates by; ``metadata`` keeps its own producer name and sequence id.

        The future resolves to the MessageId, which is (-1, -1) where the broker dropped the
        message as a duplicate. A message over the broker's size limit fails at once with
        MessageTooBig, before anything later is sent.
        """
        headers_and_payload = encode_headers_and_payload(metadata, payload)
        async with self._send_lock:
            await self._room_for_one()
            msg = OutgoingMessage(payload=b"", sequence_id=sequence_id)
            msg.future = asyncio.get_running_loop().create_future()
            too_big = stored_too_big(headers_and_payload, self.max_message_size, is_chunk)
            if too_big is not None:
                raise too_big
            highest = max(sequence_id, highest_sequence_id if highest_sequence_id is not None else -1)
            self._next_sequence_id = max(self._next_sequence_id, highest + 1)
            send = wire.CommandSend(
                producer_id=self.producer_id, sequence_id=sequence_id, num_messages=num_messages
            )
            if highest_sequence_id is not None:
                send.highest_sequence_id = highest_sequence_id
            if is_chunk:
                send.is_chunk = True
            self._pending.messages += 1
            self._flush_batch()
            self._push(SendOp(sequence_id, commands.wrap(send), headers_and_payload, [msg], self._deadline()))
            await self._drain()
            return msg.future

    async def _enqueue(self, msg: OutgoingMessage) -> asyncio.Future[MessageId]:
        # One message at a time per producer, in call order: a chunked message is written chunk
        # by chunk (waiting for the socket between chunks) and nothing may slip in between.
        async with self._send_lock:
            await self._room_for_one()
            pushes = self._pushes
            msg.future = asyncio.get_running_loop().create_future()
            if msg.sequence_id is None:
                sequence_id = self._next_sequence_id
                self._next_sequence_id += 1
            else:
                sequence_id = msg.sequence_id
                self._next_sequence_id = max(self._next_sequence_id, sequence_id + 1)
            self._pending.messages += 1
            try:
                if self.config.batching_enabled and msg.deliver_at is None:
                    self._add_to_batch(msg, sequence_id)
                else:
                    self._flush_batch()
                    ops = self._ops.for_message(
                        msg,
                        sequence_id,
                        self.producer_name(),
                        self.max_message_size,
                        _now_ms(),
                        self._deadline,
                    )
                    for op in ops:
                        if msg.future.done():
                            break  # failed (timeout, close) while its chunks were being written
                        self._push(op)
                        if op.chunk is not None:
                            # Let other producers on the connection take turns with their chunks.
                            await asyncio.sleep(0)
                            await self._drain()
            except ClientError as exc:
                self._pending.fail_messages([msg], exc)
            if self._pushes != pushes:
                await self._drain()
            return msg.future

    async def _room_for_one(self) -> None:
        """Open, with room for one more message under ``max_pending_messages`` (waiting for it
        when ``block_if_queue_full``, else ProducerQueueIsFull)."""
        self._check_open()
        limit = self.config.max_pending_messages
        if limit > 0 and self._pending.messages >= limit:
            await self._pending.reserve(limit, self.config.block_if_queue_full, self.name, self._check_open)
            self._check_open()

    async def _drain(self) -> None:
        if self.state is State.READY and self.cnx is not None:
            with contextlib.suppress(ConnectionClosed):
                await self.cnx.drain()

    def _check_open(self) -> None:
        if self.state in (State.CLOSING, State.CLOSED, State.FAILED):
            raise AlreadyClosed(f"{self.name} is closed")

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
            self._pending.fail_messages(
                built.messages, MessageTooBig(f"batch of {len(headers_and_payload)} bytes")
            )
            return
        self._push(batch_op(self.producer_id, built, headers_and_payload, self._deadline()))

    def _push(self, op: SendOp) -> None:
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
        op = self._pending.first()
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
        self._pending.pop_first()
        data = receipt.message_id
        # A duplicate's receipt carries (-1, -1) as u64 (2**64 - 1): read it back as -1.
        ledger, entry = (
            (to_signed(data.ledger_id), to_signed(data.entry_id))
            if receipt.HasField("message_id")
            else (-1, -1)
        )
        self._last_sequence_id_published = max(
            self._last_sequence_id_published,
            receipt.highest_sequence_id or receipt.sequence_id,
            op.sequence_id,
        )
        self._pending.complete(op, self.partition, ledger, entry, self._topic)

    def on_send_error(self, cnx: Connection, error: wire.CommandSendError) -> None:
        if cnx is not self.cnx:
            return
        exc = server_error(error.error, error.message)
        if error.error == wire.ChecksumError or (
            self.config.fail_refused_sends and error.error != wire.TopicTerminatedError
        ):
            self._pending.drop_message_of(error.sequence_id, exc)
        elif error.error == wire.TopicTerminatedError:
            self._pending.fail_all(exc)
        else:
            log.warning("%s: send error %s; reconnecting", self.name, exc)
            asyncio.get_running_loop().create_task(cnx.close())

    def _reconnect_refused(self, exc: ClientError) -> None:
        # As Pulsar's clients: a topic past a backlog quota with the producer_exception policy
        # (or whose broker's disk is full) fails the sends waiting for it; with
        # producer_request_hold they wait (to their timeout).
        if isinstance(exc, ProducerBlockedQuotaExceededException):
            log.warning(
                "%s: producer blocked (%s), failing %d pending sends", self.name, exc, len(self._pending)
            )
            self._pending.fail_all(exc)

    async def _send_timeout_loop(self) -> None:
        timeout = self.config.send_timeout_millis / 1000
        tick = min(1.0, max(0.05, timeout / 4))
        while self.state not in (State.CLOSED, State.FAILED):
            await asyncio.sleep(tick)
            if self._pending and self._pending.first().deadline <= time.monotonic():
                log.warning("%s: send timed out, failing %d pending sends", self.name, len(self._pending))
                self._pending.fail_all(
                    Timeout(f"{self.name}: no receipt within {self.config.send_timeout_millis} ms")
                )

    # --- flush and close --------------------------------------------------------------------------
    async def flush(self) -> None:
        """Send the current batch and wait until everything sent so far is acknowledged."""
        self._flush_batch()
        futures = self._pending.futures()
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)

    async def close(self) -> None:
        """Flush, wait for outstanding receipts (up to the operation timeout), then close."""
        if self.state in (State.CLOSED, State.CLOSING):
            return
        if self.state is State.READY:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.client.operation_timeout):
                    await self.flush()
        else:
            self._flush_batch()
        self.state = State.CLOSING
        self._pending.wake_waiters()
        self._stop_reconnecting()
        if self._timeout_task is not None:
            self._timeout_task.cancel()
        self._pending.fail_all(
            AlreadyClosed(f"{self.name} closed before the broker acknowledged the message")
        )
        cnx = self.cnx
        if cnx is not None and not cnx.is_closed:
            with contextlib.suppress(ClientError):
                await cnx.request(wire.CommandCloseProducer(producer_id=self.producer_id, request_id=0))
            cnx.remove_producer(self.producer_id)
        self.state = State.CLOSED
        self.client.forget(self)


def _now_ms() -> int:
    return int(time.time() * 1000)
