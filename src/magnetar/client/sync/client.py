"""The blocking API: the asyncio client run on a background event-loop thread.

``magnetar.client.Client`` is this ``Client``. A call that must wait (``send``,
``flush``, ``subscribe``, a ``receive`` with nothing queued) hands a coroutine to the loop
thread and waits for it. The calls made once per message do not wait for the loop, which
costs two thread wake-ups each: ``send_async`` queues the message for the loop and returns,
``receive`` takes a message already queued on the caller's thread, and acknowledgements are
posted to the loop. Posted work runs in the order it was posted, before anything the same
thread asks for afterwards. Callbacks (``send_async``, ``message_listener``) run on the loop
thread, or for listeners on a listener thread, never on the caller's.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

from magnetar.client.client import Client as AsyncClient
from magnetar.client.message import MessageId
from magnetar.client.sync.column_reader import ColumnReader
from magnetar.client.sync.consumer import Consumer, Reader
from magnetar.client.sync.loop import ClientLoop
from magnetar.client.sync.producer import Producer
from magnetar.client.sync.table_view import TableView

R = TypeVar("R")


class Client:
    """Blocking client: ``with Client("pulsar://localhost:6650") as client: ...``."""

    def __init__(self, service_url: str, **options: Any) -> None:
        self._loop = ClientLoop()

        async def make() -> AsyncClient:
            return AsyncClient(service_url, **options)

        try:
            self._client = self._loop.run(make())
        except BaseException:
            self._loop.stop()
            raise
        #: Producers whose queued sends ``close`` must hand over before the client closes.
        self._producers: weakref.WeakSet[Producer] = weakref.WeakSet()

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self._loop.run(coro)

    @property
    def aio(self) -> AsyncClient:
        """The asyncio client underneath (use it only on ``loop``)."""
        return self._client

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop.loop

    def create_producer(self, topic: str, **options: Any) -> Producer:
        producer = Producer(self._loop, self._run(self._client.create_producer(topic, **options)))
        self._producers.add(producer)
        return producer

    def subscribe(self, topic: str | list[str], subscription_name: str, **options: Any) -> Consumer:
        listener = options.pop("message_listener", None)
        consumer = Consumer(
            self._loop, self._run(self._client.subscribe(topic, subscription_name, **options))
        )
        if listener is not None:
            consumer._set_listener(listener)
        return consumer

    def create_reader(self, topic: str, start_message_id: MessageId, **options: Any) -> Reader:
        listener = options.pop("reader_listener", None)
        reader = Reader(self._loop, self._run(self._client.create_reader(topic, start_message_id, **options)))
        if listener is not None:
            reader._set_listener(listener)
        return reader

    def create_column_reader(self, topic: str, start_message_id: MessageId, **options: Any) -> ColumnReader:
        """A blocking ``ColumnReader`` (``receive_columns``) of one topic partition."""
        return ColumnReader(
            self._loop, self._run(self._client.create_column_reader(topic, start_message_id, **options))
        )

    def create_table_view(
        self, topic: str, subscription_name: str | None = None, **options: Any
    ) -> TableView:
        """A ``TableView`` of ``topic`` (every partition, read compacted), once it holds what the
        topic held."""
        return TableView(
            self._loop, self._run(self._client.create_table_view(topic, subscription_name, **options))
        )

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._run(self._client.get_topic_partitions(topic))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            for producer in list(self._producers):
                producer.close()  # after the sends it still holds
            self._run(self._client.close())
        finally:
            self._loop.stop()

    shutdown = close

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
