"""The blocking API: the asyncio client run on a background event-loop thread.

``magnetar.client.Client`` is this module's ``Client``; each call hands a coroutine to the
loop thread and waits for it. Callbacks (``send_async``, ``message_listener``) run on the
loop thread, or for listeners on a listener thread, never on the caller's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from magnetar.client import errors
from magnetar.client.client import Client as AsyncClient
from magnetar.client.message import Message, MessageId

log = logging.getLogger(__name__)
R = TypeVar("R")


class Result(enum.IntEnum):
    """Outcome passed to ``send_async`` callbacks, as the official client's ``pulsar.Result``."""

    Ok = 0
    UnknownError = 1
    Timeout = 5
    ConnectError = 3
    AlreadyClosed = 23
    ProducerQueueIsFull = 19
    MessageTooBig = 20
    TopicTerminated = 22
    ServerError = 100


def result_of(exc: BaseException | None) -> Result:
    if exc is None:
        return Result.Ok
    for kind, result in (
        (errors.Timeout, Result.Timeout),
        (errors.AlreadyClosed, Result.AlreadyClosed),
        (errors.ProducerQueueIsFull, Result.ProducerQueueIsFull),
        (errors.MessageTooBig, Result.MessageTooBig),
        (errors.TopicTerminated, Result.TopicTerminated),
        (errors.ConnectError, Result.ConnectError),
        (errors.ServerError, Result.ServerError),
    ):
        if isinstance(exc, kind):
            return result
    return Result.UnknownError


class _LoopThread:
    """An event loop running for ever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="magnetar-client-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("blocking client call made on the client's own loop thread (from a callback?)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


class Client:
    """Blocking client: ``with Client("pulsar://localhost:6650") as client: ...``."""

    def __init__(self, service_url: str, **options: Any) -> None:
        self._thread = _LoopThread()

        async def make() -> AsyncClient:
            return AsyncClient(service_url, **options)

        try:
            self._client = self._thread.run(make())
        except BaseException:
            self._thread.stop()
            raise
        self._listeners = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="magnetar-listener")

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self._thread.run(coro)

    @property
    def aio(self) -> AsyncClient:
        """The asyncio client underneath (use it only on ``loop``)."""
        return self._client

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._thread.loop

    def create_producer(self, topic: str, **options: Any) -> Producer:
        return Producer(self, self._run(self._client.create_producer(topic, **options)))

    def subscribe(self, topic: str | list[str], subscription_name: str, **options: Any) -> Consumer:
        listener = options.pop("message_listener", None)
        consumer = Consumer(self, self._run(self._client.subscribe(topic, subscription_name, **options)))
        if listener is not None:
            consumer._set_listener(listener)
        return consumer

    def create_reader(self, topic: str, start_message_id: MessageId, **options: Any) -> Reader:
        listener = options.pop("reader_listener", None)
        reader = Reader(self, self._run(self._client.create_reader(topic, start_message_id, **options)))
        if listener is not None:
            reader._set_listener(listener)
        return reader

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._run(self._client.get_topic_partitions(topic))

    def close(self) -> None:
        if self._thread.loop.is_closed():
            return
        try:
            self._run(self._client.close())
        finally:
            self._listeners.shutdown(wait=False)
            self._thread.stop()

    shutdown = close

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class _Wrapper:
    def __init__(self, client: Client, inner: Any) -> None:
        self._client = client
        self._inner = inner

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self._client._run(coro)

    def _call(self, fn: Callable[..., R], *args: Any) -> R:
        async def call() -> R:
            return fn(*args)

        return self._run(call())

    def topic(self) -> str:
        return self._inner.topic()

    def is_connected(self) -> bool:
        return self._inner.is_connected()

    def close(self) -> None:
        if not self._client._thread.loop.is_closed():
            self._run(self._inner.close())

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class Producer(_Wrapper):
    def producer_name(self) -> str:
        return self._inner.producer_name()

    def last_sequence_id(self) -> int:
        return self._inner.last_sequence_id()

    def send(self, content: bytes, **kwargs: Any) -> MessageId:
        """Publish and wait for the broker's receipt."""
        return self._run(self._inner.send(content, **kwargs))

    def send_async(
        self, content: bytes, callback: Callable[[Result, MessageId | None], None] | None, **kwargs: Any
    ):
        """Queue a message; ``callback(result, message_id)`` runs on the client's loop thread."""

        def done(exc: BaseException | None, msg_id: MessageId | None) -> None:
            if callback is None:
                return
            try:
                callback(result_of(exc), msg_id)
            except Exception:
                log.exception("send_async callback failed")

        self._run(self._inner.send_async(content, done, **kwargs))

    def flush(self) -> None:
        self._run(self._inner.flush())


class Consumer(_Wrapper):
    def subscription_name(self) -> str:
        return self._inner.subscription_name()

    def consumer_name(self) -> str:
        return self._inner.consumer_name()

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``magnetar.client.errors.Timeout`` after ``timeout_millis``."""
        return self._run(self._inner.receive(timeout_millis))

    def acknowledge(self, message: Message | MessageId) -> None:
        self._run(self._inner.acknowledge(message))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        self._run(self._inner.acknowledge_cumulative(message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._call(self._inner.negative_acknowledge, message)

    def redeliver_unacknowledged_messages(self) -> None:
        self._run(self._inner.redeliver_unacknowledged_messages())

    def seek(self, position: MessageId | int) -> None:
        self._run(self._inner.seek(position))

    def get_last_message_id(self) -> MessageId:
        return self._run(self._inner.get_last_message_id())

    def unsubscribe(self) -> None:
        self._run(self._inner.unsubscribe())

    def _set_listener(self, listener: Callable[[Any, Message], None]) -> None:
        executor = self._client._listeners

        def deliver(msg: Message) -> None:
            executor.submit(self._call_listener, listener, msg)

        children = getattr(self._inner, "_children", [self._inner])

        async def install() -> None:
            for child in children:
                child.listener = deliver
                while child._queue:
                    queued = child._queue.popleft()
                    child._message_processed(queued)
                    deliver(queued)

        self._run(install())

    def _call_listener(self, listener: Callable[[Any, Message], None], msg: Message) -> None:
        try:
            listener(self, msg)
        except Exception:
            log.exception("message listener failed")


class Reader(Consumer):
    def read_next(self, timeout_millis: int | None = None) -> Message:
        return self._run(self._inner.read_next(timeout_millis))

    def has_message_available(self) -> bool:
        return self._run(self._inner.has_message_available())
