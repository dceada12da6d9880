"""The consumer's receive queue and its flow permits.

``ReceiveQueue`` holds the messages delivered and not yet taken, and the receives waiting
for one: a message goes to the listener if one is set, else to the oldest waiting receive,
else into the queue. Every message handed to the application goes through ``taken`` (the
consumer gives its permit back and starts its ack timeout there).

``FlowPermits`` keeps the FLOW side, as Pulsar's: ``receiver_queue_size`` permits after
SUBSCRIBE, and permits given back in one FLOW once half the queue's worth has gathered. With
``receiver_queue_size=0`` (the zero-queue consumer) nothing is fetched ahead: one message is
asked for whenever the queue is empty and a receive (or a listener) wants one. The broker's
count of our permits is kept: a batch of n messages arrives on one permit and leaves that
count at 1 - n, so the next request after the batch's messages are taken asks for n.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from magnetar.client.columns import MessageColumns
from magnetar.client.errors import AlreadyClosed, Timeout
from magnetar.client.message import Message
from magnetar.protocol import commands
from magnetar.protocol import pulsar_wire_pb2 as wire

#: ``listener(message)``: takes each message instead of the receive queue (loop thread).
Listener = Callable[[Message], None]

#: What a queue holds: messages, or for a ColumnReader each entry's columns.
Item = TypeVar("Item", Message, MessageColumns)


class ReceiveQueue(Generic[Item]):
    """Messages waiting for the application, and receives waiting for messages."""

    def __init__(self, taken: Callable[[Item], None]) -> None:
        self._messages: collections.deque[Item] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[Item]] = collections.deque()
        self._taken: Callable[[Item], None] = taken
        #: Called with each message instead of queueing it (the sync facade's message_listener).
        self.listener: Callable[[Item], None] | None = None
        #: Called after a message is queued (a multi-topics parent waits on it).
        self.on_queued: Callable[[], None] | None = None

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Item]:
        return iter(self._messages)

    @property
    def wants_message(self) -> bool:
        """Nothing is queued and a receive (or the listener) waits for a message."""
        return not self._messages and (bool(self._waiters) or self.listener is not None)

    def deliver(self, msg: Item) -> None:
        if self.listener is not None:
            self._taken(msg)
            self.listener(msg)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._taken(msg)
                waiter.set_result(msg)
                return
        self._messages.append(msg)
        if self.on_queued is not None:
            self.on_queued()

    def set_listener(self, listener: Callable[[Item], None]) -> None:
        """Hand every message to ``listener(msg)`` from now on, those queued first."""
        self.listener = listener
        while self._messages:
            queued = self._messages.popleft()
            self._taken(queued)
            listener(queued)

    def take(self) -> Item | None:
        """The oldest queued message, handed out; None if nothing is queued."""
        if not self._messages:
            return None
        msg = self._messages.popleft()
        self._taken(msg)
        return msg

    def poll(self) -> Item | None:
        """A queued message taken without ``taken`` (the caller has it run on the loop)."""
        if self.listener is not None:
            return None
        try:
            return self._messages.popleft()  # one atomic step: safe from another thread
        except IndexError:
            return None

    def add_waiter(self) -> asyncio.Future[Item]:
        waiter: asyncio.Future[Item] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    async def wait(self, waiter: asyncio.Future[Item], timeout_millis: int | None) -> Item:
        """The message ``waiter`` gets; raises Timeout after ``timeout_millis`` (None: never)."""
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

    def clear(self, generation: int | None = None) -> int:
        """Drop every queued message; returns how many came on connection ``generation``."""
        same = sum(_rows(m) for m in self._messages if m.cnx_generation == generation)
        self._messages.clear()
        return same

    def fail_waiters(self, reason: str) -> None:
        """The consumer closed: every waiting receive raises AlreadyClosed(``reason``)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(AlreadyClosed(reason))


class FlowPermits:
    """The permits of one consumer: what it gives back, and in zero-queue mode what it asks for."""

    def __init__(
        self,
        consumer_id: int,
        receiver_queue_size: int,
        queue: ReceiveQueue[Message] | ReceiveQueue[MessageColumns],
        send: Callable[[wire.BaseCommand], bool],
    ) -> None:
        self._consumer_id = consumer_id
        self._queue = queue
        self._send = send
        self.zero_queue = receiver_queue_size == 0
        self._queue_size = max(1, receiver_queue_size)
        self._refill_threshold = max(1, self._queue_size // 2)
        self._available = 0
        #: Zero-queue mode: the permits the broker counts for this consumer on this connection
        #: (FLOWs sent, less the messages of the entries received).
        self._broker_permits = 0

    def subscribed(self) -> wire.CommandFlow | None:
        """After SUBSCRIBE on a new connection: the FLOW to send at once (None: nothing to ask
        for). A zero queue asks for one message if a receive (or the listener) waits for it."""
        self._available = 0
        if self.zero_queue:
            self._broker_permits = 0
            if not self._queue.wants_message:
                return None
            self._broker_permits = 1
            return wire.CommandFlow(consumer_id=self._consumer_id, message_permits=1)
        return wire.CommandFlow(consumer_id=self._consumer_id, message_permits=self._queue_size)

    def arrived(self) -> None:
        """A MESSAGE came in on one permit (and the rest of a batch's once they are counted)."""
        if self.zero_queue:
            self._broker_permits -= 1

    def charged(self, messages: int) -> None:
        """Zero queue: the broker charged all ``messages`` of an entry to the one permit we gave."""
        if self.zero_queue:
            self._broker_permits -= messages - 1

    def increase(self, count: int) -> None:
        """Give ``count`` permits back, sent once half the queue's worth has gathered."""
        if self.zero_queue:
            return  # messages are asked for one at a time, by demand (``ask_for_one``)
        self._available += count
        if self._available >= self._refill_threshold:
            flow = wire.CommandFlow(consumer_id=self._consumer_id, message_permits=self._available)
            if self._send(commands.wrap(flow)):
                self._available = 0

    def ask_for_one(self) -> None:
        """Zero-queue mode: with a receive waiting (or a listener) and nothing queued, have the
        broker count one permit for us, if it does not already."""
        if not self.zero_queue or not self._queue.wants_message or self._broker_permits >= 1:
            return
        flow = wire.CommandFlow(consumer_id=self._consumer_id, message_permits=1 - self._broker_permits)
        if self._send(commands.wrap(flow)):
            self._broker_permits = 1


def _rows(item: Message | MessageColumns) -> int:
    """How many messages (flow permits) a queued item holds: a ColumnReader queues columns."""
    return len(item) if isinstance(item, MessageColumns) else 1
