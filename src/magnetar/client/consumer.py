"""The asyncio consumer: receiver queue with flow permits, acks, redelivery, chunks, seek.

Flow control as Pulsar's: after SUBSCRIBE succeeds the consumer sends FLOW with
``receiver_queue_size`` permits; each message the application takes gives one permit back
and permits are sent once half the queue's worth has gathered. Chunks that do not complete
a message give their permit back at once (see ``chunks.py``); so does anything discarded.
Permits are counted per connection: a message delivered on an older connection returns none.

``receiver_queue_size=0`` (Pulsar's zero-queue consumer): nothing is fetched ahead. A
``receive`` that finds the queue empty asks for one message (FLOW 1) and waits for it, so
on a Shared subscription no message waits in one consumer's queue while another is idle.
The consumer keeps the broker's count of its permits: a batch of n messages arrives on one
permit and leaves the broker's count at 1 - n, so the next request after the batch's
messages are taken asks for n. (Pulsar's Java zero-queue consumer closes itself on a batch
instead.) With a listener, the next message is asked for once the listener was handed the
last one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.client.acks import AckGrouper, BatchAcks, RedeliveryTimer, ack_set_words
from magnetar.client.chunks import ChunkAssembler, ChunkOutcome
from magnetar.client.compression import DecompressionError
from magnetar.client.decode import (
    Entry,
    chunk_of,
    counted_messages,
    expand,
    parse_entry,
    uncompressed_payload,
)
from magnetar.client.errors import (
    AlreadyClosed,
    ClientError,
    ConnectionClosed,
    CumulativeAcknowledgementNotAllowed,
    Timeout,
)
from magnetar.client.handler import HandlerBase, State
from magnetar.client.message import ChunkMessageId, Message, MessageId
from magnetar.protocol import broadcast, commands
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import ChecksumMismatch, ProtocolError

if TYPE_CHECKING:
    from magnetar.client.client import Client
    from magnetar.client.connection import Connection

log = logging.getLogger(__name__)

_Sub = wire.CommandSubscribe
_ValidationError = wire.CommandAck


class ConsumerType(enum.IntEnum):
    Exclusive = _Sub.Exclusive
    Shared = _Sub.Shared
    Failover = _Sub.Failover
    KeyShared = _Sub.Key_Shared
    #: Every consumer of the subscription receives every message (a Magnetar broker's broadcast
    #: subscription). Sent as Exclusive with the broadcast subscription property, so each
    #: consumer may also acknowledge cumulatively.
    Broadcast = -1


class InitialPosition(enum.IntEnum):
    Latest = _Sub.Latest
    Earliest = _Sub.Earliest


@dataclass(slots=True)
class ConsumerConfig:
    subscription_name: str
    consumer_type: int = ConsumerType.Exclusive
    initial_position: int = InitialPosition.Latest
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int = 0
    negative_ack_redelivery_delay_ms: int = 60_000
    max_pending_chunked_message: int = 10
    auto_ack_oldest_chunked_message_on_queue_full: bool = False
    expire_time_of_incomplete_chunked_message_ms: int = 60_000
    properties: dict[str, str] | None = None
    subscription_properties: dict[str, str] | None = None
    is_read_compacted: bool = False
    replicate_subscription_state_enabled: bool = False
    start_message_id_inclusive: bool = False
    batch_index_ack_enabled: bool = False
    priority_level: int | None = None
    ack_group_time_ms: int = 100
    # Readers: a non-durable subscription starting at a given message id.
    durable: bool = True
    start_message_id: MessageId | None = None

    @property
    def shared(self) -> bool:
        return int(self.consumer_type) in (ConsumerType.Shared, ConsumerType.KeyShared)

    @property
    def broadcast(self) -> bool:
        return int(self.consumer_type) == ConsumerType.Broadcast


class Consumer(HandlerBase):
    """Receives from one topic (or one partition) on one subscription."""

    def __init__(self, client: Client, topic: str, config: ConsumerConfig, partition: int = -1) -> None:
        super().__init__(client, topic)
        self.config = config
        self.partition = partition
        self.consumer_id = client.new_consumer_id()
        self._queue: collections.deque[Message] = collections.deque()
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._zero_queue = config.receiver_queue_size == 0
        self._queue_size = max(1, config.receiver_queue_size)
        self._refill_threshold = max(1, self._queue_size // 2)
        self._available_permits = 0
        #: Zero-queue mode: the permits the broker counts for this consumer on this connection
        #: (FLOWs sent, less the messages of the entries received).
        self._broker_permits = 0
        self._chunks = ChunkAssembler(
            config.max_pending_chunked_message,
            config.auto_ack_oldest_chunked_message_on_queue_full,
            config.expire_time_of_incomplete_chunked_message_ms,
        )
        self._batch_acks = BatchAcks()
        self._acks = AckGrouper()
        self._nacks = RedeliveryTimer()
        self._unacked = RedeliveryTimer()
        self._start_message_id = config.start_message_id
        self._last_dequeued: MessageId | None = None
        self._epoch = 0
        self._seek_done: asyncio.Future | None = None
        self._tasks: list[asyncio.Task] = []
        self.reached_end_of_topic = False
        self.is_active: bool | None = None
        #: Called with each message instead of queueing it (the sync facade's message_listener).
        self.listener: Any = None
        #: Called after a message is queued (a multi-topics parent waits on it).
        self.on_queued: Any = None

    # --- accessors --------------------------------------------------------------------------------
    def subscription_name(self) -> str:
        return self.config.subscription_name

    def consumer_name(self) -> str:
        return self.config.consumer_name or ""

    @property
    def pending_chunked_messages(self) -> int:
        return self._chunks.pending

    @property
    def queued_messages(self) -> int:
        return len(self._queue)

    # --- connecting -------------------------------------------------------------------------------
    async def _connection_opened(self, cnx: Connection) -> None:
        self._reset_for_new_connection()
        cnx.register_consumer(self.consumer_id, self)
        try:
            await cnx.request(self._subscribe_command())
        except BaseException:
            cnx.remove_consumer(self.consumer_id)
            raise
        if self.state in (State.CLOSING, State.CLOSED):
            cnx.remove_consumer(self.consumer_id)
            raise AlreadyClosed(f"{self.name} closed while subscribing")
        self._available_permits = 0
        if self._zero_queue:
            self._broker_permits = 0
            self._ask_for_one()
        else:
            flow = wire.CommandFlow(consumer_id=self.consumer_id, message_permits=self._queue_size)
            cnx.send_command(commands.wrap(flow))
        if not self._tasks:
            self._tasks = [asyncio.get_running_loop().create_task(self._timers_loop())]
        if self._seek_done is not None and not self._seek_done.done():
            self._seek_done.set_result(None)

    def _reset_for_new_connection(self) -> None:
        """Forget what the old connection delivered: the broker sends everything unacked again."""
        if not self.config.durable and self._seek_done is None:
            if self._queue:
                first = self._queue[0].message_id().chunk_message_ids()[0]
                self._start_message_id = _previous(first)
            elif self._last_dequeued is not None:
                self._start_message_id = self._last_dequeued
        self._queue.clear()
        self._chunks.clear()
        self._batch_acks.clear()

    def _subscribe_command(self) -> wire.CommandSubscribe:
        cfg = self.config
        body = _Sub(
            topic=self._topic,
            subscription=cfg.subscription_name,
            sub_type=_Sub.Exclusive if cfg.broadcast else int(cfg.consumer_type),
            consumer_id=self.consumer_id,
            request_id=0,
            durable=cfg.durable,
            initial_position=int(cfg.initial_position),
            read_compacted=cfg.is_read_compacted,
            replicate_subscription_state=cfg.replicate_subscription_state_enabled,
        )
        if cfg.consumer_name:
            body.consumer_name = cfg.consumer_name
        if cfg.priority_level is not None:
            body.priority_level = cfg.priority_level
        if not cfg.durable and self._start_message_id is not None:
            body.start_message_id.CopyFrom(self._start_message_id.to_proto(with_batch=True))
        if not cfg.shared:
            body.consumer_epoch = self._epoch
        for key, value in (cfg.properties or {}).items():
            body.metadata.add(key=key, value=value)
        for key, value in (cfg.subscription_properties or {}).items():
            body.subscription_properties.add(key=key, value=value)
        if cfg.broadcast:
            body.subscription_properties.add(
                key=broadcast.BROADCAST_PROPERTY, value=broadcast.BROADCAST_VALUE
            )
        if int(cfg.consumer_type) == ConsumerType.KeyShared:
            body.key_shared_meta.key_shared_mode = wire.AUTO_SPLIT
        return body

    def on_close_by_broker(self, cnx: Connection) -> None:
        if cnx is self.cnx:
            log.info("%s closed by the broker, reconnecting", self.name)
            self._connection_lost()

    def on_connection_closed(self, cnx: Connection) -> None:
        if cnx is self.cnx:
            self._connection_lost()

    def on_active_consumer_change(self, cnx: Connection, is_active: bool) -> None:
        self.is_active = is_active

    def on_reached_end_of_topic(self, cnx: Connection) -> None:
        self.reached_end_of_topic = True

    def has_reached_end_of_topic(self) -> bool:
        """The broker said the topic is terminated and everything on it is acknowledged (Pulsar's
        hasReachedEndOfTopic): nothing more will come."""
        return self.reached_end_of_topic

    # --- incoming messages ------------------------------------------------------------------------
    def on_message(self, cnx: Connection, command: wire.CommandMessage, payload: memoryview) -> None:
        if cnx is not self.cnx or self.state in (State.CLOSING, State.CLOSED):
            return
        if command.HasField("consumer_epoch") and command.consumer_epoch < self._epoch:
            return  # sent before a redeliver-all; it comes again
        if self._zero_queue:
            self._broker_permits -= 1  # and the rest of a batch's messages once they are counted
            try:
                self._on_message(command, payload)
            finally:
                self._ask_for_one()
            return
        self._on_message(command, payload)

    def _on_message(self, command: wire.CommandMessage, payload: memoryview) -> None:
        try:
            entry = parse_entry(command, payload, self.partition, self._topic)
        except ChecksumMismatch:
            self._discard_unparsed(command.message_id, payload, _ValidationError.ChecksumMismatch)
            return
        except ProtocolError:
            self._discard_unparsed(command.message_id, payload, _ValidationError.BatchDeSerializeError)
            return
        self._charged(entry.batch_size)
        if entry.is_chunk:
            if self._is_prior_to_start(entry.message_id):
                self._increase_permits(1)
            else:
                self._on_chunk(entry)
            return
        try:
            data = uncompressed_payload(entry.metadata, entry.payload)
            messages = expand(entry, data, self._topic, self.cnx_generation)
        except DecompressionError:
            self._discard_corrupt(command.message_id, _ValidationError.DecompressionError, entry.batch_size)
            return
        except ProtocolError:
            self._discard_corrupt(
                command.message_id, _ValidationError.BatchDeSerializeError, entry.batch_size
            )
            return
        if entry.is_batch:
            self._batch_acks.delivered(entry.message_id, entry.batch_size, entry.unacked)
        self._deliver_all(messages, entry.batch_size if entry.is_batch else 1)

    def _on_chunk(self, entry: Entry) -> None:
        outcome = self._chunks.receive(chunk_of(entry), _now_ms())
        self._apply_chunk_outcome(outcome)
        if outcome.completed is None:
            return
        assembled = outcome.completed
        msg_id = ChunkMessageId(assembled.chunk_ids)
        try:
            data = uncompressed_payload(entry.metadata, assembled.payload)
        except DecompressionError:
            log.error("%s: chunked message %s does not decompress; acknowledging it", self.name, msg_id)
            self._ack_ids(assembled.chunk_ids)
            self._increase_permits(1)
            return
        del assembled.payload
        self._deliver_all(expand(entry, data, self._topic, self.cnx_generation, msg_id), 1)

    def _apply_chunk_outcome(self, outcome: ChunkOutcome) -> None:
        if outcome.ack:
            self._ack_ids(outcome.ack)
        if outcome.redeliver and self.config.durable:
            when = time.monotonic() + self.config.negative_ack_redelivery_delay_ms / 1000
            for msg_id in outcome.redeliver:
                self._nacks.add(msg_id, when)
        if outcome.permits:
            self._increase_permits(outcome.permits)

    def _deliver_all(self, messages: list[Message], permits_used: int) -> None:
        skipped = permits_used - len(messages)
        for msg in messages:
            if self._acks.is_duplicate(msg.message_id()) or self._is_prior_to_start(msg.message_id()):
                skipped += 1
                continue
            self._deliver(msg)
        if skipped > 0:
            self._increase_permits(skipped)

    def _is_prior_to_start(self, msg_id: MessageId) -> bool:
        """Whether a reader (or a consumer after seek) must skip ``msg_id``: it is before its start."""
        start = self._start_message_id
        if start is None or isinstance(msg_id, ChunkMessageId) or start.ledger_id() != msg_id.ledger_id():
            return False
        inclusive = self.config.start_message_id_inclusive
        if msg_id.entry_id() == start.entry_id() and start.batch_index() >= 0:
            if msg_id.batch_index() < 0:
                return False
            if inclusive:
                return msg_id.batch_index() < start.batch_index()
            return msg_id.batch_index() <= start.batch_index()
        return msg_id.entry_id() < start.entry_id() if inclusive else msg_id.entry_id() <= start.entry_id()

    def _deliver(self, msg: Message) -> None:
        if self.listener is not None:
            self._message_processed(msg)
            self.listener(msg)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._message_processed(msg)
                waiter.set_result(msg)
                return
        self._queue.append(msg)
        if self.on_queued is not None:
            self.on_queued()

    def _charged(self, messages: int) -> None:
        """Zero queue: the broker charged all ``messages`` of an entry to the one permit we gave."""
        if self._zero_queue:
            self._broker_permits -= messages - 1

    def _discard_unparsed(self, data: wire.MessageIdData, payload: memoryview, validation_error: int) -> None:
        messages = counted_messages(payload)
        self._charged(messages)
        self._discard_corrupt(data, validation_error, messages)

    def _discard_corrupt(self, data: wire.MessageIdData, validation_error: int, messages: int) -> None:
        """Acknowledge an entry we cannot use (so that it is not redelivered for ever) and give back
        the permits the broker charged for it: all of a batch's, or the window shrinks for good."""
        log.error("%s: discarding corrupt message %d:%d", self.name, data.ledger_id, data.entry_id)
        ack = wire.CommandAck(
            consumer_id=self.consumer_id,
            ack_type=wire.CommandAck.Individual,
            validation_error=validation_error,
        )
        ack.message_id.add(ledger_id=data.ledger_id, entry_id=data.entry_id)
        self._send(commands.wrap(ack))
        self._increase_permits(messages)

    # --- flow permits -----------------------------------------------------------------------------
    def _message_processed(self, msg: Message) -> None:
        self._last_dequeued = msg.message_id()
        if self.config.unacked_messages_timeout_ms > 0:
            self._unacked.add(
                msg.message_id(), time.monotonic() + self.config.unacked_messages_timeout_ms / 1000
            )
        if msg.cnx_generation == self.cnx_generation:
            self._increase_permits(1)

    def _increase_permits(self, count: int) -> None:
        if self._zero_queue:
            return  # messages are asked for one at a time, by demand (``_ask_for_one``)
        self._available_permits += count
        if self._available_permits >= self._refill_threshold:
            flow = wire.CommandFlow(consumer_id=self.consumer_id, message_permits=self._available_permits)
            if self._send(commands.wrap(flow)):
                self._available_permits = 0

    def _send(self, command: wire.BaseCommand) -> bool:
        cnx = self.cnx
        if cnx is None or cnx.is_closed or self.state is not State.READY:
            return False
        try:
            cnx.send_command(command)
        except ConnectionClosed:
            return False
        return True

    def set_listener(self, listener: Any) -> None:
        """Hand every message to ``listener(msg)`` from now on, those queued first (loop thread)."""
        self.listener = listener
        while self._queue:
            queued = self._queue.popleft()
            self._message_processed(queued)
            listener(queued)
        if self._zero_queue:
            self._ask_for_one()

    def _ask_for_one(self) -> None:
        """Zero-queue mode: with a receive waiting (or a listener) and nothing queued, have the
        broker count one permit for us, if it does not already."""
        if not self._queue and (self._waiters or self.listener is not None) and self._broker_permits < 1:
            flow = wire.CommandFlow(consumer_id=self.consumer_id, message_permits=1 - self._broker_permits)
            if self._send(commands.wrap(flow)):
                self._broker_permits = 1

    # --- receiving --------------------------------------------------------------------------------
    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises Timeout after ``timeout_millis`` (None: wait for ever)."""
        if self.state in (State.CLOSING, State.CLOSED):
            raise AlreadyClosed(f"{self.name} is closed")
        if self._queue:
            msg = self._queue.popleft()
            self._message_processed(msg)
            return msg
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._zero_queue:
            self._ask_for_one()
        timeout = None if timeout_millis is None else timeout_millis / 1000
        try:
            done, _ = await asyncio.wait({waiter}, timeout=timeout)
        finally:
            if not waiter.done():
                waiter.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
        if not done:
            raise Timeout(f"no message within {timeout_millis} ms")
        return waiter.result()

    receive_async = receive

    def poll_queued(self) -> Message | None:
        """A message already queued, taken without waiting; None if there is none.

        For the blocking API (``sync.py``), which calls it on its caller's thread: taking from
        the queue is one atomic ``deque.popleft``. The caller must then have
        ``_message_processed`` run on the loop for it, as ``receive`` does.
        """
        if self.listener is not None or self.state in (State.CLOSING, State.CLOSED):
            return None
        try:
            return self._queue.popleft()
        except IndexError:
            return None

    # --- acknowledging ----------------------------------------------------------------------------
    # The ``*_nowait`` forms are plain calls, for the loop's own callers: the blocking API posts
    # acknowledgements to the loop this way instead of waiting for a coroutine per message.
    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (for a chunked message: every chunk)."""
        self.acknowledge_nowait(message)

    def acknowledge_nowait(self, message: Message | MessageId) -> None:
        msg_id = _id_of(message)
        self._unacked.remove(msg_id)
        if isinstance(msg_id, ChunkMessageId):
            self._ack_ids(msg_id.chunk_message_ids())
        elif msg_id.is_batch:
            if self._batch_acks.ack(msg_id):
                self._ack_ids([msg_id.entry_position()])
            elif self.config.batch_index_ack_enabled:
                remaining = self._batch_acks.remaining(msg_id)
                if remaining is not None:
                    self._queue_ack(msg_id, ack_set_words(*remaining))
        else:
            self._ack_ids([msg_id])

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge this message and every one before it (not for Shared / Key_Shared)."""
        self.acknowledge_cumulative_nowait(message)

    def check_cumulative_allowed(self) -> None:
        """Raise CumulativeAcknowledgementNotAllowed on a Shared / Key_Shared subscription."""
        if self.config.shared:
            raise CumulativeAcknowledgementNotAllowed(f"{self.name}: cumulative ack on a shared subscription")

    def acknowledge_cumulative_nowait(self, message: Message | MessageId) -> None:
        self.check_cumulative_allowed()
        msg_id = _id_of(message)
        target: MessageId | None = msg_id.entry_position()
        if msg_id.is_batch and not self._batch_acks.is_last_unacked_up_to(msg_id):
            entry = msg_id.entry_id()
            target = MessageId(msg_id.partition(), msg_id.ledger_id(), entry - 1) if entry > 0 else None
        self._unacked.remove_up_to(msg_id)
        self._nacks.remove_up_to(msg_id)
        if target is None:
            return
        self._batch_acks.forget_up_to(target)
        self._acks.add_cumulative(target)

    def _ack_ids(self, ids: list[MessageId]) -> None:
        for msg_id in ids:
            self._nacks.remove(msg_id)
            self._queue_ack(msg_id.entry_position(), None)

    def _queue_ack(self, msg_id: MessageId, ack_set: list[int] | None) -> None:
        if self._acks.add_individual(msg_id, ack_set) or self.config.ack_group_time_ms <= 0:
            self.flush_acks()

    def flush_acks(self) -> None:
        """Send the grouped acknowledgements now."""
        if not self._acks or self.cnx is None or self.state is not State.READY:
            return
        for ack in self._acks.take(self.consumer_id):
            self._send(commands.wrap(ack))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Have the message redelivered after ``negative_ack_redelivery_delay_ms``."""
        msg_id = _id_of(message)
        self._unacked.remove(msg_id)
        when = time.monotonic() + self.config.negative_ack_redelivery_delay_ms / 1000
        for chunk_id in msg_id.chunk_message_ids():
            self._nacks.add(chunk_id, when)

    async def redeliver_unacknowledged_messages(self) -> None:
        """Have the broker send again everything not yet acknowledged."""
        self._redeliver([])

    def _redeliver(self, ids: list[MessageId]) -> None:
        if self.config.shared and ids:
            body = wire.CommandRedeliverUnacknowledgedMessages(consumer_id=self.consumer_id)
            body.message_ids.extend(i.to_proto(with_batch=False) for i in ids)
            self._send(commands.wrap(body))
            return
        # Exclusive / Failover: everything unacked comes again, so drop what is queued here.
        self.flush_acks()
        self._epoch += 1
        dropped = sum(1 for m in self._queue if m.cnx_generation == self.cnx_generation)
        self._queue.clear()
        self._chunks.clear()
        self._batch_acks.clear()
        self._unacked.clear()
        self._nacks.clear()
        body = wire.CommandRedeliverUnacknowledgedMessages(consumer_id=self.consumer_id)
        if not self.config.shared:
            body.consumer_epoch = self._epoch
        if self._send(commands.wrap(body)) and dropped:
            self._increase_permits(dropped)

    # --- timers -----------------------------------------------------------------------------------
    async def _timers_loop(self) -> None:
        tick = min(self.config.ack_group_time_ms / 1000 if self.config.ack_group_time_ms > 0 else 0.1, 0.1)
        while self.state not in (State.CLOSED, State.FAILED):
            await asyncio.sleep(tick)
            if self.state is not State.READY:
                continue
            try:
                self._on_tick()
            except ClientError as exc:
                log.debug("%s timer: %s", self.name, exc)

    def _on_tick(self) -> None:
        self.flush_acks()
        now = time.monotonic()
        due = self._nacks.take_due(now) + self._unacked.take_due(now)
        if due:
            self._redeliver(sorted(set(due)))
        expiry = self._chunks.next_expiry_ms()
        if expiry is not None and _now_ms() > expiry:
            self._apply_chunk_outcome(self._chunks.expire(_now_ms()))

    # --- seek, last id, unsubscribe, close --------------------------------------------------------
    async def seek(self, position: MessageId | int) -> None:
        """Move the subscription to a message id, or to a publish time in ms since the epoch.

        As Pulsar's clients: the message at ``position`` itself is delivered again only with
        ``start_message_id_inclusive``; a chunked message's id seeks to its first chunk then.
        """
        cnx = await self.wait_ready()
        body = wire.CommandSeek(consumer_id=self.consumer_id, request_id=0)
        previous_start = self._start_message_id
        if isinstance(position, MessageId):
            target = position
            if isinstance(position, ChunkMessageId):
                first, last = position.first_chunk_message_id(), position.last_chunk_message_id()
                target = first if self.config.start_message_id_inclusive else last
            body.message_id.CopyFrom(target.to_proto(with_batch=False))
            self._start_message_id = target
        else:
            body.message_publish_time = int(position)
            self._start_message_id = None
        self.flush_acks()
        self._seek_done = asyncio.get_running_loop().create_future()
        try:
            await cnx.request(body)
            self._queue.clear()
            self._chunks.clear()
            self._batch_acks.clear()
            self._acks.clear()
            self._last_dequeued = None
            if self.state is State.READY and self.cnx is cnx and not cnx.is_closed:
                # The broker kept us connected: no reconnect to wait for.
                self._seek_done.set_result(None)
            await asyncio.wait_for(asyncio.shield(self._seek_done), self.client.operation_timeout)
        except TimeoutError:
            raise Timeout(f"{self.name}: seek did not complete") from None
        except BaseException:
            self._start_message_id = previous_start
            raise
        finally:
            self._seek_done = None

    async def get_last_message_id(self) -> MessageId:
        cnx = await self.wait_ready()
        answer = await cnx.request(wire.CommandGetLastMessageId(consumer_id=self.consumer_id, request_id=0))
        return MessageId.from_proto(answer.last_message_id, self._topic)

    async def unsubscribe(self) -> None:
        cnx = await self.wait_ready()
        await cnx.request(wire.CommandUnsubscribe(consumer_id=self.consumer_id, request_id=0))
        await self._shutdown(send_close=False)

    async def close(self) -> None:
        await self._shutdown(send_close=True)

    async def _shutdown(self, send_close: bool) -> None:
        if self.state in (State.CLOSING, State.CLOSED):
            return
        self.flush_acks()
        self.state = State.CLOSING
        self._stop_reconnecting()
        for task in self._tasks:
            task.cancel()
        cnx = self.cnx
        if send_close and cnx is not None and not cnx.is_closed:
            with contextlib.suppress(ClientError):
                await cnx.request(wire.CommandCloseConsumer(consumer_id=self.consumer_id, request_id=0))
        if cnx is not None:
            cnx.remove_consumer(self.consumer_id)
        self.state = State.CLOSED
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(AlreadyClosed(f"{self.name} closed"))
        self.client.forget(self)


def _id_of(message: Message | MessageId) -> MessageId:
    return message.message_id() if isinstance(message, Message) else message


def _previous(msg_id: MessageId) -> MessageId:
    """The position just before ``msg_id``: where a reader restarts to get it again."""
    if msg_id.batch_index() >= 0:
        return MessageId(
            msg_id.partition(),
            msg_id.ledger_id(),
            msg_id.entry_id(),
            msg_id.batch_index() - 1,
            msg_id.batch_size(),
        )
    return MessageId(msg_id.partition(), msg_id.ledger_id(), msg_id.entry_id() - 1)


def _now_ms() -> int:
    return int(time.time() * 1000)
