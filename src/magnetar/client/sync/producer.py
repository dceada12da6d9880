"""The blocking producer: sends queued to the client's loop in call order."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from magnetar.client import errors
from magnetar.client.message import MessageId
from magnetar.client.partitioned_producer import PartitionedProducer
from magnetar.client.producer import Producer as AioProducer
from magnetar.client.producer import SendCallback
from magnetar.client.sync.facade import Facade
from magnetar.client.sync.loop import ClientLoop
from magnetar.client.sync.result import Result, result_of

log = logging.getLogger(__name__)
R = TypeVar("R")


class Producer(Facade[AioProducer | PartitionedProducer]):
    """Sends go to the loop through a queue of this producer's own, in call order: ``send_async``
    returns once the message is queued there; ``send``, ``flush`` and ``close`` wait their turn
    behind it. The queue holds at most ``max_pending_messages`` messages not yet handed to the
    asyncio producer (which holds as many again until their receipts): past that a caller waits
    with ``block_if_queue_full``, or its callback gets ``Result.ProducerQueueIsFull``."""

    def __init__(self, client_loop: ClientLoop, inner: AioProducer | PartitionedProducer) -> None:
        super().__init__(client_loop, inner)
        config = inner.config
        self._limit = config.max_pending_messages
        self._block = config.block_if_queue_full
        self._ops: deque[tuple[Callable[[], Awaitable[object]], bool]] = deque()
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
        self._loop.check_thread()
        receipt: concurrent.futures.Future[MessageId] = concurrent.futures.Future()

        def settle(exc: BaseException | None, msg_id: MessageId | None) -> None:
            if msg_id is not None:
                receipt.set_result(msg_id)
            else:  # a send that fails has no id
                receipt.set_exception(exc or errors.ClientError("send completed with no message id"))

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

        self._loop.check_thread()
        if not self._submit_send(content, done, kwargs):
            full = errors.ProducerQueueIsFull(f"{self.topic()}: {self._limit} messages queued")
            self._loop.post(done, full, None)

    def _submit_send(self, content: bytes, done: SendCallback, kwargs: dict[str, Any]) -> bool:
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
        if not self._loop.is_closed():
            self._wait_turn(self._inner.close)

    # -- the queue to the loop -----------------------------------------------------------------
    def _wait_turn(self, fn: Callable[[], Awaitable[R]]) -> R:
        """Run ``fn()`` on the loop after the sends queued before, and wait for its result."""
        self._loop.check_thread()
        outcome: concurrent.futures.Future[R] = concurrent.futures.Future()

        async def op() -> None:
            try:
                outcome.set_result(await fn())
            except Exception as exc:
                outcome.set_exception(exc)

        self._submit(op, is_message=False)
        return outcome.result()

    def _submit(self, op: Callable[[], Awaitable[object]], is_message: bool) -> bool:
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
            self._loop.post(self._start_draining)
        except errors.AlreadyClosed:
            with self._ops_lock:
                self._ops.clear()
                self._queued = 0
                self._draining = False
            raise
        return True

    def _start_draining(self) -> None:
        self._loop.loop.create_task(self._drain())

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
