"""The blocking API: the asyncio client run on a background event-loop thread.

``magnetar.client.Client`` is this module's ``Client``. A call that must wait (``send``,
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
import concurrent.futures
import enum
import logging
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from magnetar.client import errors
from magnetar.client.chunks import ChunkProgress
from magnetar.client.client import Client as AsyncClient
from magnetar.client.column_reader import DEFAULT_MAX_BYTES, DEFAULT_MAX_MESSAGES
from magnetar.client.columns import MessageColumns
from magnetar.client.message import Message, MessageId

log = logging.getLogger(__name__)
R = TypeVar("R")


class Result(enum.IntEnum):
    """Outcome passed to ``send_async`` callbacks: the official client's ``pulsar.Result`` names and
    numbers (``ServerError`` is ours, for a broker error with no more precise result here)."""

    Ok = 0
    UnknownError = 1
    Timeout = 3
    ConnectError = 5
    AlreadyClosed = 15
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicTerminated = 33
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
        (errors.ProducerBlockedQuotaExceededError, Result.ProducerBlockedQuotaExceededError),
        (errors.ProducerBlockedQuotaExceededException, Result.ProducerBlockedQuotaExceededException),
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
            self.check_thread()
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def check_thread(self) -> None:
        if threading.current_thread() is self._thread:
            raise RuntimeError("blocking client call made on the client's own loop thread (from a callback?)")

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


class _Mailbox:
    """Plain calls from callers' threads to the loop thread, run there in the order posted.

    ``call_soon_threadsafe`` per call would wake the loop (a write to its self-pipe) once per
    message; a burst of posts made before the loop gets to them shares one wake-up.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            self._calls.append((fn, args))
            if len(self._calls) > 1:
                return  # a run is scheduled and has not taken the list yet
        try:
            self._loop.call_soon_threadsafe(self._run)
        except RuntimeError:  # the loop is closed
            with self._lock:
                self._calls.clear()
            raise errors.AlreadyClosed("the client is closed") from None

    def _run(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for fn, args in calls:
            try:
                fn(*args)
            except Exception:
                log.exception("posted client call %r failed", fn)


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
        self._mailbox = _Mailbox(self._thread.loop)
        #: Producers whose queued sends ``close`` must hand over before the client closes.
        self._producers: weakref.WeakSet[Producer] = weakref.WeakSet()

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self._thread.run(coro)

    def _post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon, after everything posted before, without waiting."""
        self._thread.check_thread()
        self._mailbox.post(fn, *args)

    @property
    def aio(self) -> AsyncClient:
        """The asyncio client underneath (use it only on ``loop``)."""
        return self._client

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._thread.loop

    def create_producer(self, topic: str, **options: Any) -> Producer:
        producer = Producer(self, self._run(self._client.create_producer(topic, **options)))
        self._producers.add(producer)
        return producer

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

    def create_column_reader(self, topic: str, start_message_id: MessageId, **options: Any) -> ColumnReader:
        """A blocking ``ColumnReader`` (``receive_columns``) of one topic partition."""
        return ColumnReader(
            self, self._run(self._client.create_column_reader(topic, start_message_id, **options))
        )

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._run(self._client.get_topic_partitions(topic))

    def close(self) -> None:
        if self._thread.loop.is_closed():
            return
        try:
            for producer in list(self._producers):
                producer.close()  # after the sends it still holds
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
    """Sends go to the loop through a queue of this producer's own, in call order: ``send_async``
    returns once the message is queued there; ``send``, ``flush`` and ``close`` wait their turn
    behind it. The queue holds at most ``max_pending_messages`` messages not yet handed to the
    asyncio producer (which holds as many again until their receipts): past that a caller waits
    with ``block_if_queue_full``, or its callback gets ``Result.ProducerQueueIsFull``."""

    def __init__(self, client: Client, inner: Any) -> None:
        super().__init__(client, inner)
        config = inner.config
        self._limit = config.max_pending_messages
        self._block = config.block_if_queue_full
        self._ops: deque[tuple[Callable[[], Awaitable[Any]], bool]] = deque()
        self._ops_lock = threading.Lock()
        #: Signalled when a message leaves a full queue (callers blocked on it wait here).
        self._room = threading.Condition(self._ops_lock)
        #: Messages in ``_ops`` (flush and close do not count), and callers waiting for room.
        self._queued = 0
        self._waiting = 0
        self._draining = False

    def producer_name(self) -> str:
        return self._inner.producer_name()

    def last_sequence_id(self) -> int:
        return self._inner.last_sequence_id()

    def send(self, content: bytes, **kwargs: Any) -> MessageId:
        """Publish and wait for the broker's receipt."""
        self._client._thread.check_thread()
        receipt: concurrent.futures.Future[MessageId] = concurrent.futures.Future()

        def settle(exc: BaseException | None, msg_id: MessageId | None) -> None:
            if exc is not None:
                receipt.set_exception(exc)
            else:
                receipt.set_result(msg_id)

        if not self._submit_send(content, settle, kwargs):
            raise errors.ProducerQueueIsFull(f"{self.topic()}: {self._limit} messages queued")
        return receipt.result()

    def send_async(
        self, content: bytes, callback: Callable[[Result, MessageId | None], None] | None, **kwargs: Any
    ) -> None:
        """Queue a message; ``callback(result, message_id)`` runs on the client's loop thread.

        As with the official client, a failure (queue full, closed producer, message too big)
        reaches the callback, not the caller.
        """

        def done(exc: BaseException | None, msg_id: MessageId | None) -> None:
            if callback is None:
                return
            try:
                callback(result_of(exc), msg_id)
            except Exception:
                log.exception("send_async callback failed")

        self._client._thread.check_thread()
        if not self._submit_send(content, done, kwargs):
            full = errors.ProducerQueueIsFull(f"{self.topic()}: {self._limit} messages queued")
            self._client._post(done, full, None)

    def _submit_send(
        self, content: bytes, done: Callable[[BaseException | None, MessageId | None], None], kwargs: Any
    ) -> bool:
        """Queue one message for the loop; ``done(exc, message_id)`` gets its outcome there,
        whether the asyncio producer refuses it or the broker receipts it. False: no room."""

        async def op() -> None:
            try:
                await self._inner.send_async(content, done, **kwargs)
            except Exception as exc:
                done(exc, None)

        return self._submit(op, is_message=True)

    def flush(self) -> None:
        """Wait until every message queued so far is receipted (or failed)."""
        self._wait_turn(self._inner.flush)

    def close(self) -> None:
        if not self._client._thread.loop.is_closed():
            self._wait_turn(self._inner.close)

    # -- the queue to the loop -----------------------------------------------------------------
    def _wait_turn(self, fn: Callable[[], Awaitable[R]]) -> R:
        """Run ``fn()`` on the loop after the sends queued before, and wait for its result."""
        self._client._thread.check_thread()
        outcome: concurrent.futures.Future[R] = concurrent.futures.Future()

        async def op() -> None:
            try:
                outcome.set_result(await fn())
            except Exception as exc:
                outcome.set_exception(exc)

        self._submit(op, is_message=False)
        return outcome.result()

    def _submit(self, op: Callable[[], Awaitable[Any]], is_message: bool) -> bool:
        """Queue ``op`` for the loop; False (nothing queued) for a message the queue has no
        room for, when the caller is not to wait for room."""
        with self._ops_lock:
            if is_message and self._limit > 0:
                while self._queued >= self._limit:
                    if not self._block:
                        return False
                    self._waiting += 1
                    try:
                        self._room.wait()
                    finally:
                        self._waiting -= 1
                self._queued += 1
            self._ops.append((op, is_message))
            if self._draining:
                return True
            self._draining = True
        try:
            self._client._post(self._start_draining)
        except errors.AlreadyClosed:
            with self._ops_lock:
                self._ops.clear()
                self._queued = 0
                self._draining = False
            raise
        return True

    def _start_draining(self) -> None:
        self._client.loop.create_task(self._drain())

    async def _drain(self) -> None:
        """Hand the queued operations to the asyncio producer one by one (loop thread).

        A send that has room in the asyncio producer's queue goes through without suspending,
        so a burst of them costs one task; one that waits (its queue full, a chunked message
        written chunk by chunk) holds back the ones behind it, which keeps them in order.
        """
        while True:
            with self._ops_lock:
                if not self._ops:
                    self._draining = False
                    return
                op, is_message = self._ops.popleft()
                if is_message and self._limit > 0:
                    self._queued -= 1
                    if self._waiting:
                        self._room.notify()  # one message's room: one waiting caller goes on
            await op()


class Consumer(_Wrapper):
    """``receive`` takes a message already queued without waiting for the loop (only when the
    queue is empty does it wait there), and acknowledgements are posted to the loop in order."""

    def __init__(self, client: Client, inner: Any) -> None:
        super().__init__(client, inner)
        # A consumer of one topic (or a reader) has these; one of several topics does not, and
        # each of its calls waits for the loop.
        self._poll_queued = getattr(inner, "poll_queued", None)
        self._ack_nowait = getattr(inner, "acknowledge_nowait", None)
        self._ack_cumulative_nowait = getattr(inner, "acknowledge_cumulative_nowait", None)

    def subscription_name(self) -> str:
        return self._inner.subscription_name()

    def consumer_name(self) -> str:
        return self._inner.consumer_name()

    def has_reached_end_of_topic(self) -> bool:
        """The topic is terminated and everything on it acknowledged: nothing more will come."""
        return self._inner.has_reached_end_of_topic()

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises ``magnetar.client.errors.Timeout`` after ``timeout_millis``."""
        msg = self._take_queued()
        return msg if msg is not None else self._run(self._inner.receive(timeout_millis))

    def _take_queued(self) -> Message | None:
        if self._poll_queued is None:
            return None
        self._client._thread.check_thread()
        msg = self._poll_queued()
        if msg is not None:
            self._client._post(self._inner._message_processed, msg)  # permits, ack timeout
        return msg

    def acknowledge(self, message: Message | MessageId) -> None:
        if self._ack_nowait is None:
            self._run(self._inner.acknowledge(message))
            return
        self._client._post(self._ack_nowait, _checked_id(message))

    def acknowledge_cumulative(self, message: Message | MessageId) -> None:
        if self._ack_cumulative_nowait is None:
            self._run(self._inner.acknowledge_cumulative(message))
            return
        self._inner.check_cumulative_allowed()
        self._client._post(self._ack_cumulative_nowait, _checked_id(message))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        self._client._post(self._inner.negative_acknowledge, _checked_id(message))

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

        async def install() -> None:
            self._inner.set_listener(deliver)

        self._run(install())

    def _call_listener(self, listener: Callable[[Any, Message], None], msg: Message) -> None:
        try:
            listener(self, msg)
        except Exception:
            log.exception("message listener failed")


class Reader(Consumer):
    def read_next(self, timeout_millis: int | None = None) -> Message:
        msg = self._take_queued()
        return msg if msg is not None else self._run(self._inner.read_next(timeout_millis))

    def has_message_available(self) -> bool:
        return self._run(self._inner.has_message_available())


class ColumnReader(_Wrapper):
    """A reader whose messages come as columns, whole entries at a time (``receive_columns``):
    the asyncio ``ColumnReader``'s calls, each waiting for the client's loop. Its position moves
    (and its entries are acknowledged) as columns are handed out."""

    def receive_columns(
        self,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        timeout_millis: int | None = None,
    ) -> MessageColumns:
        """The next queued entries as columns, until ``max_messages`` rows or ``max_bytes`` of
        payload (at least one entry); waits for one if none is queued, raising
        ``magnetar.client.errors.Timeout`` after ``timeout_millis``."""
        return self._run(self._inner.receive_columns(max_messages, max_bytes, timeout_millis))

    def has_message_available(self) -> bool:
        return self._run(self._inner.has_message_available())

    def seek(self, position: MessageId | int) -> None:
        self._run(self._inner.seek(position))

    def get_last_message_id(self) -> MessageId:
        return self._run(self._inner.get_last_message_id())

    def queued_messages(self) -> int:
        """Entries received and not handed out yet."""
        return self._on_loop(lambda: self._inner.queued_messages)

    def chunk_progress(self) -> ChunkProgress:
        """How far chunked messages have come (the asyncio reader's ``chunk_progress()``, read on
        the loop): the newest chunk taken in, the first chunks of messages not handed out yet."""
        return self._on_loop(self._inner.chunk_progress)

    def _on_loop(self, fn: Callable[[], R]) -> R:
        async def call() -> R:
            return fn()

        return self._run(call())


def _checked_id(message: Message | MessageId) -> Message | MessageId:
    """A posted call cannot raise to its caller: reject what is not a message here."""
    if not isinstance(message, (Message, MessageId)):
        raise TypeError(f"expected a Message or MessageId, not {type(message).__name__}")
    return message
