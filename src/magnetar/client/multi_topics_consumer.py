"""One subscription over many partitions or topics: Pulsar's ``MultiTopicsConsumer``.

It receives from one consumer per partition or topic; each keeps its own receiver queue and flow
permits, the parent takes from whichever has a message, in turn.
"""

from __future__ import annotations

import asyncio
import dataclasses

from magnetar.client.consumer import Consumer, ConsumerConfig, Listener
from magnetar.client.errors import AlreadyClosed, InvalidConfiguration, Timeout
from magnetar.client.message import Message, MessageId
from magnetar.client.services import ClientServices
from magnetar.protocol.topic_name import partition_name


async def consumer_for(
    client: ClientServices, topics: list[str], config: ConsumerConfig
) -> Consumer | MultiTopicsConsumer:
    """A ``Consumer`` for one topic with no partitions, else a ``MultiTopicsConsumer`` over every
    partition of every topic (not started)."""
    parts: list[tuple[str, int]] = []
    for topic in topics:
        partitions = await client.get_partitioned_topic_metadata(topic)
        if partitions <= 0:
            parts.append((topic, -1))
        else:
            parts.extend((partition_name(topic, i), i) for i in range(partitions))
    if len(parts) == 1 and len(topics) == 1 and parts[0][1] == -1:
        return Consumer(client, topics[0], config)
    if config.receiver_queue_size == 0:
        # As Pulsar's: one message at a time cannot be kept across several topics' consumers.
        raise InvalidConfiguration(
            "receiver_queue_size=0 needs a single non-partitioned topic, "
            f"not {', '.join(topics)} ({len(parts)} topics or partitions)"
        )
    return MultiTopicsConsumer(client, topics, config, parts)


class MultiTopicsConsumer:
    """One subscription over many partitions or topics."""

    def __init__(
        self,
        client: ClientServices,
        topics: list[str],
        config: ConsumerConfig,
        parts: list[tuple[str, int]],
    ) -> None:
        self.client = client
        self._topics = topics
        self.config = config
        self._children: list[Consumer] = []
        self._by_topic: dict[str, Consumer] = {}
        self._ready = asyncio.Event()
        self._listener: Listener | None = None
        #: Where the next receive starts looking, so that no child starves the others.
        self._turn = 0
        self._closed = False
        for name, index in parts:
            self._add_child(name, index)

    def _add_child(self, name: str, partition: int) -> Consumer:
        """A consumer for one more topic or partition (not started)."""
        child = Consumer(self.client, name, dataclasses.replace(self.config), partition=partition)
        child.on_queued = self._ready.set
        self._children.append(child)
        self._by_topic[child.topic()] = child
        if self._listener is not None:
            child.set_listener(self._listener)
        return child

    async def _remove_child(self, topic: str) -> None:
        """Close and forget the consumer of ``topic`` (its queued messages go with it)."""
        child = self._by_topic.pop(topic, None)
        if child is not None:
            self._children.remove(child)
            await child.close()

    def set_listener(self, listener: Listener) -> None:
        """Every child's messages, and those of children added later, go to ``listener``."""
        self._listener = listener
        for child in self._children:
            child.set_listener(listener)

    def topic(self) -> str:
        return ",".join(self._topics)

    def subscription_name(self) -> str:
        return self.config.subscription_name

    def consumer_name(self) -> str:
        return self.config.consumer_name or ""

    async def start(self) -> None:
        await asyncio.gather(*(c.start() for c in self._children))

    def _child_for(self, message: Message | MessageId) -> Consumer:
        if isinstance(message, Message):
            child = self._by_topic.get(message.topic_name())
            if child is not None:
                return child
            message = message.message_id()
        topic = message.topic_name()
        if topic in self._by_topic:
            return self._by_topic[topic]
        for child in self._children:
            if child.partition == message.partition():
                return child
        if not self._children:
            # A pattern's topics can all be gone (as Pulsar's client, which fails the ack then).
            raise AlreadyClosed(f"{self.topic()}: no consumer left for {topic or message}")
        return self._children[0]

    async def receive(self, timeout_millis: int | None = None) -> Message:
        loop = asyncio.get_running_loop()
        deadline = None if timeout_millis is None else loop.time() + timeout_millis / 1000
        while True:
            if self._closed:
                raise AlreadyClosed("consumer is closed")
            children = self._children
            for _ in range(len(children)):
                self._turn = (self._turn + 1) % len(children)
                child = children[self._turn]
                if child.queued_messages:
                    return await child.receive(0)
            self._ready.clear()
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise Timeout(f"no message within {timeout_millis} ms")
            try:
                async with asyncio.timeout(remaining):
                    await self._ready.wait()
            except TimeoutError:
                raise Timeout(f"no message within {timeout_millis} ms") from None

    receive_async = receive

    async def acknowledge(self, message: Message | MessageId) -> None:
        await self._child_for(message).acknowledge(message)

    async def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        await self._child_for(message).acknowledge_cumulative(message)

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._child_for(message).negative_acknowledge(message)

    async def redeliver_unacknowledged_messages(self) -> None:
        await asyncio.gather(*(c.redeliver_unacknowledged_messages() for c in self._children))

    async def seek(self, position: MessageId | int) -> None:
        if (
            isinstance(position, MessageId)
            and position != MessageId.earliest
            and position != MessageId.latest
        ):
            await self._child_for(position).seek(position)
        else:
            await asyncio.gather(*(c.seek(position) for c in self._children))

    async def get_last_message_id(self) -> MessageId:
        ids = await asyncio.gather(*(c.get_last_message_id() for c in self._children))
        return max(ids)

    async def unsubscribe(self) -> None:
        await asyncio.gather(*(c.unsubscribe() for c in self._children))
        self._closed = True

    async def close(self) -> None:
        self._closed = True
        await asyncio.gather(*(c.close() for c in self._children))
        self._ready.set()
        self.client.forget(self)

    def is_connected(self) -> bool:
        return all(c.is_connected() for c in self._children)

    def has_reached_end_of_topic(self) -> bool:
        """Every topic is terminated and everything on it acknowledged."""
        return bool(self._children) and all(c.has_reached_end_of_topic() for c in self._children)

    async def __aenter__(self) -> MultiTopicsConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
