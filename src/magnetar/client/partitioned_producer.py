"""A partitioned topic's producer: one producer per partition behind one face, the
``MessageRouter`` (message_router.py) picking the partition of each message."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from magnetar.client.message import MessageId
from magnetar.client.message_router import CustomRouter, MessageRouter
from magnetar.client.producer import Producer, ProducerConfig, SendCallback
from magnetar.client.services import ClientServices
from magnetar.protocol.topic_name import partition_name


async def producer_for(
    client: ClientServices, topic: str, config: ProducerConfig, router: CustomRouter | None
) -> Producer | PartitionedProducer:
    """A ``Producer`` for a topic with no partitions, else a ``PartitionedProducer`` (not started)."""
    partitions = await client.get_partitioned_topic_metadata(topic)
    if partitions <= 0:
        return Producer(client, topic, config)
    return PartitionedProducer(client, topic, config, partitions, router)


class PartitionedProducer:
    """A producer per partition; ``send`` picks one."""

    def __init__(
        self,
        client: ClientServices,
        topic: str,
        config: ProducerConfig,
        partitions: int,
        router: CustomRouter | None = None,
    ) -> None:
        self.client = client
        self._topic = topic
        self._producers = [
            Producer(client, partition_name(topic, i), dataclasses.replace(config), partition=i)
            for i in range(partitions)
        ]
        # The hashing scheme as each producer validated it.
        self._router = MessageRouter(partitions, self._producers[0].config.hashing_scheme, router)

    def topic(self) -> str:
        return self._topic

    @property
    def config(self) -> ProducerConfig:
        """Every partition's producer has a copy of this."""
        return self._producers[0].config

    def producer_name(self) -> str:
        return self._producers[0].producer_name()

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id() for p in self._producers)

    async def start(self) -> None:
        await asyncio.gather(*(p.start() for p in self._producers))

    def _pick(self, content: bytes, kwargs: dict[str, Any]) -> Producer:
        return self._producers[self._router.choose_partition(content, kwargs.get("partition_key"))]

    async def send(self, content: bytes, **kwargs: Any) -> MessageId:
        return await self._pick(content, kwargs).send(content, **kwargs)

    async def send_async(
        self, content: bytes, callback: SendCallback | None = None, **kwargs: Any
    ) -> asyncio.Future[MessageId]:
        return await self._pick(content, kwargs).send_async(content, callback, **kwargs)

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self._producers))

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self._producers))
        self.client.forget(self)

    def is_connected(self) -> bool:
        return all(p.is_connected() for p in self._producers)

    async def __aenter__(self) -> PartitionedProducer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
