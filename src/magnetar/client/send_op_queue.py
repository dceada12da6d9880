"""A producer's sends awaiting their receipts (Pulsar's ``OpSendMsgQueue``): the SENDs in send
order (the broker answers in order, and after a reconnect they are all written again), the count
of messages they hold against ``max_pending_messages``, and completing or failing the messages'
futures. (The broker's ``flow_control`` counts the sends a connection has in flight; this is
the client's side.)"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Iterable, Iterator

from magnetar.client.accumulator import OutgoingMessage
from magnetar.client.errors import ProducerQueueIsFull
from magnetar.client.message import ChunkMessageId, MessageId
from magnetar.client.send_ops import SendOp, stored_too_big


class SendOpQueue:
    def __init__(self) -> None:
        self._ops: collections.deque[SendOp] = collections.deque()
        #: Messages queued and not yet completed (in the open batch too).
        self.messages = 0
        self._space = asyncio.Event()
        self._space.set()

    def __iter__(self) -> Iterator[SendOp]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def __bool__(self) -> bool:
        return bool(self._ops)

    def first(self) -> SendOp:
        return self._ops[0]

    def append(self, op: SendOp) -> None:
        self._ops.append(op)

    def pop_first(self) -> SendOp:
        return self._ops.popleft()

    # --- room for more messages -------------------------------------------------------------------
    def wake_waiters(self) -> None:
        """Let callers waiting for room look again (on close: they find the producer closed)."""
        self._space.set()

    async def reserve(self, limit: int, block: bool, name: str, check_open: Callable[[], None]) -> None:
        """Wait until fewer than ``limit`` messages are pending (ProducerQueueIsFull at once
        unless ``block``); ``check_open`` raises when the producer closed meanwhile."""
        while limit > 0 and self.messages >= limit:
            if not block:
                raise ProducerQueueIsFull(f"{name} has {self.messages} messages pending")
            self._space.clear()
            await self._space.wait()
            check_open()

    def _release(self, count: int) -> None:
        self.messages = max(0, self.messages - count)
        self._space.set()

    # --- completing -------------------------------------------------------------------------------
    def complete(self, op: SendOp, partition: int, ledger: int, entry: int, topic: str) -> None:
        """``op``'s receipt came: its messages get their ids (a chunked message's on its last chunk)."""
        if op.chunk is not None:
            op.chunk.ids.append(MessageId(partition, ledger, entry, topic=topic))
            if len(op.chunk.ids) < op.chunk.num_chunks:
                return
            self._resolve(op.messages[0], ChunkMessageId(op.chunk.ids))
            return
        if op.batch:
            n = op.num_messages
            for index, msg in enumerate(op.messages):
                self._resolve(msg, MessageId(partition, ledger, entry, index, n, topic))
        else:
            self._resolve(op.messages[0], MessageId(partition, ledger, entry, topic=topic))

    def _resolve(self, msg: OutgoingMessage, msg_id: MessageId) -> None:
        self._release(1)
        if msg.future is not None and not msg.future.done():
            msg.future.set_result(msg_id)

    def fail_messages(self, messages: list[OutgoingMessage], exc: Exception) -> None:
        for msg in messages:
            self._release(1)
            if msg.future is not None and not msg.future.done():
                msg.future.set_exception(exc)

    def drop_message_of(self, sequence_id: int, exc: Exception) -> None:
        """Remove every pending op of the message with this sequence id and fail it."""
        dropped = [op for op in self._ops if op.sequence_id == sequence_id]
        self._ops = collections.deque(op for op in self._ops if op.sequence_id != sequence_id)
        self._fail_ops(dropped, exc)

    def fail_all(self, exc: Exception) -> None:
        pending, self._ops = self._ops, collections.deque()
        self._fail_ops(pending, exc)

    def _fail_ops(self, ops: Iterable[SendOp], exc: Exception) -> None:
        """Fail the messages of ``ops``, each once (a chunked message's ops all name it)."""
        seen: set[int] = set()
        for op in ops:
            msgs = [m for m in op.messages if id(m) not in seen]
            seen.update(id(m) for m in msgs)
            self.fail_messages(msgs, exc)

    def drop_too_big(self, max_size: int) -> None:
        """Fail the queued messages a broker's limit refuses (it may be lower than the last
        one's): sent anyway, each would close the connection again, for ever."""
        for op in [op for op in self._ops if op.chunk is None]:
            too_big = stored_too_big(op.headers_and_payload, max_size, op.command.send.is_chunk)
            if too_big is not None:
                self.drop_message_of(op.sequence_id, too_big)

    def futures(self) -> list[asyncio.Future[MessageId]]:
        """The futures of the messages pending now (``flush`` waits for them)."""
        return [m.future for op in self._ops for m in op.messages if m.future is not None]
