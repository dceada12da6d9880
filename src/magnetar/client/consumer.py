"""The asyncio consumer: one subscription on one topic (or partition), made of small parts.

- ``consumer_config.py``: the options and the SUBSCRIBE they make;
- ``receive_queue.py``: the receive queue (receives waiting, the listener) and flow permits,
  zero-queue mode included;
- ``incoming.py``: MESSAGE to handed-out messages (batches, chunks, corrupt entries);
- ``acknowledger.py``: individual, batch-index and cumulative acks, grouped;
- ``redelivery.py``: negative acks, the unacked timeout, the consumer epoch, REDELIVER;
- ``start_position.py``: a reader's start, a seek's target and what lies before them.

The consumer owns the connection's life (subscribe, reconnect, close), dropping what it holds
when everything unacknowledged comes again, and the timer that flushes acks, redelivers what
is due and expires incomplete chunked messages.
Permits are counted per connection: a message delivered on an older connection returns none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.client.acknowledger import Acknowledger
from magnetar.client.chunks import ChunkAssembler, ChunkProgress
from magnetar.client.consumer_config import ConsumerConfig, ConsumerType, InitialPosition, subscribe_command
from magnetar.client.errors import AlreadyClosed, ClientError, CumulativeAcknowledgementNotAllowed, Timeout
from magnetar.client.handler import HandlerBase, State
from magnetar.client.incoming import EntryReceiver
from magnetar.client.message import Message, MessageId
from magnetar.client.receive_queue import FlowPermits, Listener, ReceiveQueue
from magnetar.client.redelivery import Redelivery
from magnetar.client.start_position import StartPosition
from magnetar.protocol import commands
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.topic_name import split_partition

if TYPE_CHECKING:
    from magnetar.client.connection import Connection
    from magnetar.client.services import ClientServices

__all__ = ["Consumer", "ConsumerConfig", "ConsumerType", "InitialPosition", "Listener"]

log = logging.getLogger(__name__)


class Consumer(HandlerBase):
    """Receives from one topic (or one partition) on one subscription."""

    def __init__(
        self, client: ClientServices, topic: str, config: ConsumerConfig, partition: int = -1
    ) -> None:
        super().__init__(client, topic)
        self.config = config
        # As Pulsar's client: a partition named directly keeps its index in the ids it gives.
        self.partition = partition if partition >= 0 else split_partition(topic)[1]
        self.consumer_id = client.new_consumer_id()
        self._queue: ReceiveQueue[Message] = ReceiveQueue(self._message_processed)
        self._flow = FlowPermits(
            self.consumer_id, config.receiver_queue_size, self._queue, self._send_if_ready
        )
        self._chunks = ChunkAssembler(
            config.max_pending_chunked_message,
            config.auto_ack_oldest_chunked_message_on_queue_full,
            config.expire_time_of_incomplete_chunked_message_ms,
        )
        self._redelivery = Redelivery(config)
        self._acks = Acknowledger(
            self.consumer_id, config, self._redelivery, self._send_if_ready, self._can_flush
        )
        self._start = StartPosition(config)
        self._entries = EntryReceiver(
            self,
            self._chunks,
            queue=self._queue,
            flow=self._flow,
            acks=self._acks,
            redelivery=self._redelivery,
            start=self._start,
        )
        self._tasks: list[asyncio.Task] = []
        self.reached_end_of_topic = False
        self.is_active: bool | None = None

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

    @property
    def listener(self) -> Listener | None:
        """Called with each message instead of queueing it (the sync facade's message_listener)."""
        return self._queue.listener

    @property
    def on_queued(self) -> Callable[[], None] | None:
        """Called after a message is queued (a multi-topics parent waits on it)."""
        return self._queue.on_queued

    @on_queued.setter
    def on_queued(self, callback: Callable[[], None] | None) -> None:
        self._queue.on_queued = callback

    def chunk_progress(self) -> ChunkProgress:
        """How far chunked messages have come: the newest chunk taken in (discarded ones
        included), the first chunk of each chunked message not handed out yet, and whether the
        receive queue is empty. Call it on the client's loop, where they change."""
        return self._chunks.progress([m.message_id() for m in self._queue])

    # --- connecting -------------------------------------------------------------------------------
    async def _connection_opened(self, cnx: Connection) -> None:
        self._reset_for_new_connection()
        cnx.register_consumer(self.consumer_id, self)
        subscribe = subscribe_command(
            self.config, self._topic, self.consumer_id, self._redelivery.epoch, self._start.message_id
        )
        await self._register(cnx, subscribe, lambda: cnx.remove_consumer(self.consumer_id))
        flow = self._flow.subscribed()
        if flow is not None:
            cnx.send_command(commands.wrap(flow))
        if not self._tasks:
            self._tasks = [asyncio.get_running_loop().create_task(self._timers_loop())]
        self._start.subscribed()

    def _reset_for_new_connection(self) -> None:
        """Forget what the old connection delivered: the broker sends everything unacked again,
        so negative acks and ack timeouts still pending are moot (asked for on the new connection,
        the message would come twice, the second copy after its acknowledgement)."""
        self._start.resume_before(next(iter(self._queue), None))
        self._forget_delivered()
        self._redelivery.clear()

    def _forget_delivered(self) -> int:
        """Drop what is queued or being assembled: the broker delivers it again. Returns how
        many queued messages came on the current connection (their permits are owed)."""
        dropped = self._queue.clear(generation=self.cnx_generation)
        self._chunks.clear()
        self._acks.batches.clear()
        return dropped

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
        if command.HasField("consumer_epoch") and command.consumer_epoch < self._redelivery.epoch:
            return  # sent before a redeliver-all; it comes again
        self._flow.arrived()
        try:
            self._entries.receive(command, payload)
        finally:
            self._flow.ask_for_one()

    def _message_processed(self, msg: Message) -> None:
        """``msg`` was handed to the application: give its permit back, start its ack timeout."""
        self._start.last_dequeued = msg.message_id()
        self._redelivery.handed_out(msg.message_id())
        if msg.cnx_generation == self.cnx_generation:
            self._flow.increase(1)

    def _can_flush(self) -> bool:
        return self.cnx is not None and self.state is State.READY

    # --- receiving --------------------------------------------------------------------------------
    def set_listener(self, listener: Listener) -> None:
        """Hand every message to ``listener(msg)`` from now on, those queued first (loop thread)."""
        self._queue.set_listener(listener)
        self._flow.ask_for_one()

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises Timeout after ``timeout_millis`` (None: wait for ever)."""
        if self.state in (State.CLOSING, State.CLOSED):
            raise AlreadyClosed(f"{self.name} is closed")
        msg = self._queue.take()
        if msg is not None:
            return msg
        waiter = self._queue.add_waiter()
        self._flow.ask_for_one()
        return await self._queue.wait(waiter, timeout_millis)

    receive_async = receive

    def poll_queued(self) -> Message | None:
        """A message already queued, taken without waiting; None if there is none.

        For the blocking API (``sync.py``), which calls it on its caller's thread: taking from
        the queue is one atomic ``deque.popleft``. The caller must then have
        ``_message_processed`` run on the loop for it, as ``receive`` does.
        """
        if self.state in (State.CLOSING, State.CLOSED):
            return None
        return self._queue.poll()

    # --- acknowledging ----------------------------------------------------------------------------
    # The ``*_nowait`` forms are plain calls, for the loop's own callers: the blocking API posts
    # acknowledgements to the loop this way instead of waiting for a coroutine per message.
    async def acknowledge(self, message: Message | MessageId) -> None:
        """Acknowledge one message (for a chunked message: every chunk)."""
        self.acknowledge_nowait(message)

    def acknowledge_nowait(self, message: Message | MessageId) -> None:
        self._acks.acknowledge(_id_of(message))

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        """Acknowledge this message and every one before it (not for Shared / Key_Shared)."""
        self.acknowledge_cumulative_nowait(message)

    def check_cumulative_allowed(self) -> None:
        """Raise CumulativeAcknowledgementNotAllowed on a Shared / Key_Shared subscription."""
        if self.config.shared:
            raise CumulativeAcknowledgementNotAllowed(f"{self.name}: cumulative ack on a shared subscription")

    def acknowledge_cumulative_nowait(self, message: Message | MessageId) -> None:
        self.check_cumulative_allowed()
        self._acks.acknowledge_cumulative(_id_of(message))

    def flush_acks(self) -> None:
        """Send the grouped acknowledgements now."""
        self._acks.flush()

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Have the message redelivered after ``negative_ack_redelivery_delay_ms``."""
        self._redelivery.negative_acknowledge(_id_of(message))

    async def redeliver_unacknowledged_messages(self) -> None:
        """Have the broker send again everything not yet acknowledged."""
        self._redeliver([])

    def _redeliver(self, ids: list[MessageId]) -> None:
        if self.config.shared and ids:
            self._send_if_ready(commands.wrap(self._redelivery.command(self.consumer_id, ids)))
            return
        # Everything unacked comes again (always on Exclusive / Failover): drop what is held here.
        self.flush_acks()
        dropped = self._forget_delivered()
        if self._send_if_ready(commands.wrap(self._redelivery.command_for_all(self.consumer_id))) and dropped:
            self._flow.increase(dropped)

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
        due = self._redelivery.take_due(time.monotonic())
        if due:
            self._redeliver(due)
        self._entries.expire_chunks()

    # --- seek, last id, unsubscribe, close --------------------------------------------------------
    async def seek(self, position: MessageId | int) -> None:
        """Move the subscription to a message id, or to a publish time in ms since the epoch.

        As Pulsar's clients: the message at ``position`` itself is delivered again only with
        ``start_message_id_inclusive``; a chunked message's id seeks to its first chunk then.
        """
        cnx = await self.wait_ready()
        self.flush_acks()

        def accepted() -> bool:
            self._forget_delivered()
            self._acks.forget_grouped()
            return self.state is State.READY and self.cnx is cnx and not cnx.is_closed

        try:
            await self._start.seek(
                cnx.request, self.consumer_id, position, accepted, self.client.operation_timeout
            )
        except TimeoutError:
            raise Timeout(f"{self.name}: seek did not complete") from None

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
        self._queue.fail_waiters(f"{self.name} closed")
        self.client.forget(self)


def _id_of(message: Message | MessageId) -> MessageId:
    return message.message_id() if isinstance(message, Message) else message
