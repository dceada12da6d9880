"""A consumer (or a reader) on one topic or on every partition of one, over the sessions of the
workers that own them (``sessions.py``: in-process for this one's).

What Pulsar's WebSocket service gets from its internal Java consumer, built on the broker's own
SUBSCRIBE / FLOW / MESSAGE / ACK / REDELIVER: a receive queue of ``receiver_queue_size`` per
partition (permits given back as messages leave it, at half), batches taken apart (a batch entry
is acknowledged once all its members are, as the Java client does without batch-index acks),
chunked messages put together, negative acknowledgements redelivered after their delay, and
messages left unacknowledged past ``ack_timeout_ms`` redelivered. A reader is a non-durable
Exclusive subscription that starts after its start message id.

A consumer the broker closes (its topic unloaded or moved, its subscription reset), or whose
session ends (the worker that owned its topic was killed), subscribes again at the topic's
current owner, as a client would (``reconnect.py``); a reader from the last message it handed
out, a consumer where the subscription stands: what was handed out and not acknowledged comes
again, as to any Pulsar consumer. If it cannot within the bound, the consumer ends and its owner
hears why (``on_closed``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.hot_acks import HotMessage
from magnetar.protocol.message_id import INT64_MAX, to_u64
from magnetar.protocol.topic_name import TopicName
from magnetar.websocket.entry_messages import ChunkAssembly, parse_entry
from magnetar.websocket.json_shapes import IncomingMessage
from magnetar.websocket.reconnect import again
from magnetar.websocket.session import LocalSession, SessionClosed, SessionError

if TYPE_CHECKING:
    from magnetar.websocket.sessions import Sessions

log = logging.getLogger(__name__)

SubType = wire.CommandSubscribe.SubType

Key = tuple[int, int, int]  # (partition, ledger, entry)


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    subscription_type: SubType.ValueType = wire.CommandSubscribe.Exclusive
    consumer_name: str | None = None
    receiver_queue_size: int = 1000
    ack_timeout_ms: int = 0
    negative_ack_redelivery_delay_ms: int = 60_000
    priority_level: int = 0
    initial_position_earliest: bool = False
    #: A reader: non-durable, its own subscription, starting after ``start_message_id``.
    reader: bool = False
    start_message_id: wire.MessageIdData | None = None


def earliest() -> wire.MessageIdData:
    return wire.MessageIdData(ledger_id=to_u64(-1), entry_id=to_u64(-1))


def latest() -> wire.MessageIdData:
    return wire.MessageIdData(ledger_id=INT64_MAX, entry_id=INT64_MAX)


def _key(message_id: wire.MessageIdData) -> Key:
    return (message_id.partition, message_id.ledger_id, message_id.entry_id)


class LocalConsumer:
    def __init__(
        self, sessions: Sessions, topics: list[TopicName], subscription: str, options: ConsumerOptions
    ) -> None:
        self.sessions = sessions
        self._session_of: dict[int, LocalSession] = {}  # partition (-1 for none) -> its session
        self.topics = topics
        self.subscription = subscription
        self.options = options
        self._queue_size = max(options.receiver_queue_size, 1)
        self._ids: dict[int, int] = {}  # partition (-1 for none) -> consumer id
        self._partitions: dict[int, int] = {}  # consumer id -> partition
        self._to_flow: dict[int, int] = {}  # consumer id -> permits to give back
        self._queue: deque[tuple[IncomingMessage, Key]] = deque()
        self._ready = asyncio.Event()
        self._batches: dict[Key, set[int]] = {}  # members handed out and not yet acknowledged
        self._chunked: dict[Key, list[tuple[int, int]]] = {}  # a chunked message -> its chunks
        self._assembly = ChunkAssembly()
        self._deadlines: dict[Key, float] = {}  # ack timeout: entries handed out, not yet acknowledged
        self._ended: set[int] = set()  # partitions that reached the end of their terminated topic
        self._last: dict[int, wire.MessageIdData] = {}  # a reader's last message handed out, by partition
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        #: Acks of this loop turn not yet sent: individual ones, and a reader's last position.
        self._acks: dict[int, list[tuple[int, int]]] = {}
        self._cumulative: dict[int, tuple[int, int]] = {}
        self._ack_flush_scheduled = False
        self.closed = False
        #: Called once if the consumer ends without being closed by its owner.
        self.on_closed: Callable[[str], None] = lambda reason: None

    @classmethod
    async def subscribe(
        cls, sessions: Sessions, topics: list[TopicName], subscription: str, options: ConsumerOptions
    ) -> LocalConsumer:
        """Subscribed on every topic (partition), or SessionError as the broker refuses one."""
        consumer = cls(sessions, topics, subscription, options)
        try:
            for topic in topics:
                await consumer._subscribe(topic)
        except SessionError:
            consumer.close()
            raise
        if options.ack_timeout_ms > 0:
            consumer._schedule_ack_timeout()
        return consumer

    @classmethod
    def reader_subscription(cls) -> str:
        """A reader's subscription name, as the Java client makes one (``reader-`` + 10 characters)."""
        return f"reader-{secrets.token_hex(5)}"

    async def _subscribe(self, topic: TopicName) -> None:
        options = self.options
        session = await self.sessions.for_topic(topic)
        consumer_id = session.new_id()
        request_id = session.new_request_id()
        command = wire.CommandSubscribe(
            topic=str(topic),
            subscription=self.subscription,
            sub_type=options.subscription_type,
            consumer_id=consumer_id,
            request_id=request_id,
            priority_level=options.priority_level,
            durable=not options.reader,
        )
        if options.consumer_name:
            command.consumer_name = options.consumer_name
        if options.initial_position_earliest:
            command.initial_position = wire.CommandSubscribe.Earliest
        start = self._start(topic)
        if start is not None:
            command.start_message_id.CopyFrom(start)
        partition = topic.partition_index
        session.add_consumer(consumer_id, _End(self, consumer_id))
        try:
            await session.request(wrap(command), request_id)
        except SessionError:
            session.remove_consumer(consumer_id)
            raise
        self._session_of[partition] = session
        self._ids[partition] = consumer_id
        self._partitions[consumer_id] = partition
        self._flow(consumer_id, self._queue_size)

    def _start(self, topic: TopicName) -> wire.MessageIdData | None:
        """Where a reader starts: after what it handed out already (subscribing again), else after
        its start message id (latest if none)."""
        if not self.options.reader:
            return None
        return self._last.get(topic.partition_index) or self.options.start_message_id or latest()

    def _session(self, consumer_id: int) -> LocalSession | None:
        """The open session of a consumer id; None once it has ended."""
        partition = self._partitions.get(consumer_id)
        session = self._session_of.get(partition) if partition is not None else None
        return None if session is None or session.closed else session

    def _send(self, consumer_id: int, command: wire.BaseCommand) -> None:
        """Send ``command`` after the acks waiting to go, so the broker sees them first."""
        if self._acks or self._cumulative:
            self._flush_acks()
        self._send_now(consumer_id, command)

    def _send_now(self, consumer_id: int, command: wire.BaseCommand) -> None:
        if (session := self._session(consumer_id)) is not None:
            session.send(command)

    def _flow(self, consumer_id: int, permits: int) -> None:
        if permits > 0:
            self._send(consumer_id, wrap(wire.CommandFlow(consumer_id=consumer_id, message_permits=permits)))

    def _give_back(self, consumer_id: int, permits: int) -> None:
        """Permits for messages that left the queue; sent once half the queue's worth has."""
        total = self._to_flow.get(consumer_id, 0) + permits
        if total >= max(self._queue_size // 2, 1):
            self._to_flow[consumer_id] = 0
            self._flow(consumer_id, total)
        else:
            self._to_flow[consumer_id] = total

    # -- receiving -------------------------------------------------------------------------------
    def on_message(
        self,
        consumer_id: int,
        command: wire.CommandMessage | None,
        hot: HotMessage | None,
        payload: memoryview,
    ) -> None:
        partition = self._partitions.get(consumer_id)
        if partition is None or self.closed:
            return
        if hot is not None:
            ledger, entry, redelivery, ack_set = hot.ledger_id, hot.entry_id, 0, []
        else:
            assert command is not None
            data = command.message_id
            ledger, entry, redelivery = data.ledger_id, data.entry_id, command.redelivery_count
            ack_set = list(command.ack_set)
        try:
            parsed = parse_entry(ledger, entry, partition, payload, redelivery, ack_set)
        except ProtocolError as exc:
            # A corrupt entry cannot be delivered; its permit comes back and it stays unacknowledged.
            log.warning("%s: entry %d:%d cannot be read, skipped: %s", self.subscription, ledger, entry, exc)
            self._give_back(consumer_id, 1)
            return
        used = parsed.batch_size or 1
        key = (partition, ledger, entry)
        messages = parsed.messages
        if parsed.chunk is not None:
            whole = self._assembly.add(parsed, partition, redelivery)
            self._give_back(consumer_id, 1)
            if whole is None:
                return
            message, positions = whole
            self._chunked[key] = positions
            messages, used = [message], 1
        elif self.options.reader:
            messages = [m for m in messages if not self._before_start(m.message_id)]
        if parsed.batch_size:
            self._batches[key] = {m.message_id.batch_index for m in messages}
        if used > len(messages):
            self._give_back(consumer_id, used - len(messages))
        if not messages:
            return
        for message in messages:
            self._queue.append((message, key))
        self._ready.set()

    def _before_start(self, message_id: wire.MessageIdData) -> bool:
        """A reader starts after its start (Pulsar's default, not inclusive); the broker starts at
        the start's entry, so the start and what precedes it in that entry are left out here."""
        start = self._last.get(message_id.partition) or self.options.start_message_id
        if start is None or (message_id.ledger_id, message_id.entry_id) != (start.ledger_id, start.entry_id):
            return False
        return not start.HasField("batch_index") or message_id.batch_index <= start.batch_index

    async def receive(self) -> IncomingMessage:
        """The next message (waits for one); SessionClosed once the consumer has ended."""
        while not self._queue:
            if self.closed:
                raise SessionClosed("the consumer is closed")
            self._ready.clear()
            await self._ready.wait()
        message, key = self._queue.popleft()
        partition = key[0]
        consumer_id = self._ids.get(partition)
        if consumer_id is not None:
            self._give_back(consumer_id, 1)
        if self.options.reader:
            self._last[partition] = message.message_id
            if consumer_id is not None:
                self._ack(consumer_id, key, cumulative=True)
        elif self.options.ack_timeout_ms > 0:
            self._deadlines.setdefault(key, time.monotonic() + self.options.ack_timeout_ms / 1000)
        return message

    # -- acknowledging ----------------------------------------------------------------------------
    def acknowledge(self, message_id: wire.MessageIdData) -> None:
        """Acknowledge a message handed out (a batch's entry once all its members are)."""
        if self.options.reader or self.closed:
            return
        key = _key(message_id)
        consumer_id = self._ids.get(message_id.partition)
        if consumer_id is None:
            return
        members = self._batches.get(key)
        if members is not None and message_id.HasField("batch_index"):
            members.discard(message_id.batch_index)
            if members:
                return
            del self._batches[key]
        self._deadlines.pop(key, None)
        if message_id.HasField("first_chunk_message_id") or key in self._chunked:
            positions = self._chunked.pop(key, [(message_id.ledger_id, message_id.entry_id)])
            ack = wire.CommandAck(consumer_id=consumer_id, ack_type=wire.CommandAck.Individual)
            for ledger, entry in positions:
                ack.message_id.add(ledger_id=ledger, entry_id=entry)
            self._send(consumer_id, wrap(ack))
            return
        self._ack(consumer_id, key, cumulative=False)

    def _ack(self, consumer_id: int, key: Key, cumulative: bool) -> None:
        """The acks of one loop turn go as one ACK per consumer (Pulsar's Java client groups its
        acks over 100 ms; a turn spares a command per message without delaying any)."""
        if cumulative:
            self._cumulative[consumer_id] = (key[1], key[2])
        else:
            self._acks.setdefault(consumer_id, []).append((key[1], key[2]))
        if not self._ack_flush_scheduled:
            self._ack_flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_acks)

    def _flush_acks(self) -> None:
        self._ack_flush_scheduled = False
        individual, self._acks = self._acks, {}
        cumulative, self._cumulative = self._cumulative, {}
        for consumer_id, positions in individual.items():
            ack = wire.CommandAck(consumer_id=consumer_id, ack_type=wire.CommandAck.Individual)
            for ledger, entry in positions:
                ack.message_id.add(ledger_id=ledger, entry_id=entry)
            self._send_now(consumer_id, wrap(ack))
        for consumer_id, (ledger, entry) in cumulative.items():
            ack = wire.CommandAck(consumer_id=consumer_id, ack_type=wire.CommandAck.Cumulative)
            ack.message_id.add(ledger_id=ledger, entry_id=entry)
            self._send_now(consumer_id, wrap(ack))

    def negative_acknowledge(self, message_id: wire.MessageIdData) -> None:
        """Have the message's entry delivered again after the negative-ack delay."""
        if self.options.reader or self.closed:
            return
        key = _key(message_id)
        self._deadlines.pop(key, None)
        self._batches.pop(key, None)
        delay = self.options.negative_ack_redelivery_delay_ms / 1000
        asyncio.get_running_loop().call_later(delay, self._redeliver, [key])

    def _redeliver(self, keys: list[Key]) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES: the entries named for Shared and Key_Shared; for
        Exclusive and Failover, everything unacknowledged (the broker rewinds, and what waits in
        our queue is dropped with its permits given back, as the Java client does)."""
        if self.closed:
            return
        shared = self.options.subscription_type in (
            wire.CommandSubscribe.Shared,
            wire.CommandSubscribe.Key_Shared,
        )
        by_consumer: dict[int, list[Key]] = {}
        for key in keys:
            consumer_id = self._ids.get(key[0])
            if consumer_id is not None:
                by_consumer.setdefault(consumer_id, []).append(key)
        for consumer_id, named in by_consumer.items():
            command = wire.CommandRedeliverUnacknowledgedMessages(consumer_id=consumer_id)
            if shared:
                for _, ledger, entry in named:
                    command.message_ids.add(ledger_id=ledger, entry_id=entry)
            else:
                self._drop_queued(consumer_id)
            self._send(consumer_id, wrap(command))

    def _drop_queued(self, consumer_id: int) -> None:
        before = len(self._queue)
        self._drop_queued_partition(self._partitions[consumer_id])
        self._give_back(consumer_id, before - len(self._queue))

    def _schedule_ack_timeout(self) -> None:
        tick = max(self.options.ack_timeout_ms / 1000 / 4, 0.1)
        self._timer = asyncio.get_running_loop().call_later(tick, self._check_ack_timeout)

    def _check_ack_timeout(self) -> None:
        if self.closed:
            return
        now = time.monotonic()
        expired = [key for key, deadline in self._deadlines.items() if deadline <= now]
        for key in expired:
            del self._deadlines[key]
            self._batches.pop(key, None)
        if expired:
            self._redeliver(expired)
        self._schedule_ack_timeout()

    # -- end of topic, unsubscribe, close ---------------------------------------------------------
    @property
    def reached_end_of_topic(self) -> bool:
        return len(self._ended) == len(self.topics)

    def on_end_of_topic(self, consumer_id: int) -> None:
        if (partition := self._partitions.get(consumer_id)) is not None:
            self._ended.add(partition)

    async def unsubscribe(self) -> None:
        """UNSUBSCRIBE on every partition (SessionError as the broker refuses: consumers attached)."""
        self._flush_acks()
        for consumer_id, partition in list(self._partitions.items()):
            session = self._session_of[partition]
            request_id = session.new_request_id()
            command = wire.CommandUnsubscribe(consumer_id=consumer_id, request_id=request_id)
            await session.request(wrap(command), request_id)
        self.close()

    def on_closed_by_broker(self, consumer_id: int, reason: str) -> None:
        """CLOSE_CONSUMER (the topic unloaded, the subscription reset), or the session ended."""
        partition = self._partitions.pop(consumer_id, None)
        if self.closed or partition is None:
            return
        self._ids.pop(partition, None)
        self._to_flow.pop(consumer_id, None)
        self._drop_queued_partition(partition)
        self._session_of.pop(partition, None)
        task = asyncio.get_running_loop().create_task(self._resubscribe(partition, reason))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _drop_queued_partition(self, partition: int) -> None:
        self._queue = deque(item for item in self._queue if item[1][0] != partition)
        for table in (self._batches, self._deadlines, self._chunked):
            for key in [k for k in table if k[0] == partition]:
                del table[key]

    async def _resubscribe(self, partition: int, reason: str) -> None:
        topic = next(t for t in self.topics if t.partition_index == partition)
        log.info("%s on %s: %s; subscribing again", self.subscription, topic, reason)
        try:
            await again(lambda: self._subscribe(topic), reason)
        except SessionError as exc:
            self._end(str(exc))

    def _end(self, reason: str) -> None:
        if not self.closed:
            self.close()
            self.on_closed(reason)

    def close(self) -> None:
        """Stop: the owner closes the session (which drops the broker's consumers), or this was the end.
        The acks given so far go first."""
        self._flush_acks()
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in self._tasks:
            task.cancel()
        self._ready.set()


class _End:
    """One consumer id's callbacks from the session, to the consumer that owns it."""

    __slots__ = ("_consumer", "_id")

    def __init__(self, consumer: LocalConsumer, consumer_id: int) -> None:
        self._consumer = consumer
        self._id = consumer_id

    def on_message(
        self, command: wire.CommandMessage | None, hot: HotMessage | None, payload: memoryview
    ) -> None:
        self._consumer.on_message(self._id, command, hot, payload)

    def on_end_of_topic(self) -> None:
        self._consumer.on_end_of_topic(self._id)

    def on_closed(self, reason: str) -> None:
        self._consumer.on_closed_by_broker(self._id, reason)
