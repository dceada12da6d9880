"""Where a consumer starts: a reader's start message id (and where it resumes after a
reconnect), a seek and its target, and the messages before either that the consumer skips.

As Pulsar's clients: the message at the start itself is delivered only with
``start_message_id_inclusive``; a chunked message's id starts at its first chunk then, else
past its last. A seek completes once the consumer has subscribed again (the broker, as
Pulsar's, disconnects it), or at once if the broker kept it connected.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from magnetar.client.consumer_config import ConsumerConfig
from magnetar.client.message import ChunkMessageId, Message, MessageId
from magnetar.protocol import pulsar_wire_pb2 as wire


class StartPosition:
    def __init__(self, config: ConsumerConfig) -> None:
        self._inclusive = config.start_message_id_inclusive
        self._durable = config.durable
        self._seek_done: asyncio.Future | None = None
        #: Where the subscription starts (a reader's, or a seek's target); None: the broker's choice.
        self.message_id: MessageId | None = config.start_message_id
        #: The last message handed to the application (None: none since the start or a seek).
        self.last_dequeued: MessageId | None = None

    def is_prior(self, msg_id: MessageId) -> bool:
        """Whether ``msg_id`` comes before the start, so the consumer must skip it."""
        start = self.message_id
        if start is None or isinstance(msg_id, ChunkMessageId) or start.ledger_id() != msg_id.ledger_id():
            return False
        if msg_id.entry_id() == start.entry_id() and start.batch_index() >= 0:
            if msg_id.batch_index() < 0:
                return False
            if self._inclusive:
                return msg_id.batch_index() < start.batch_index()
            return msg_id.batch_index() <= start.batch_index()
        if self._inclusive:
            return msg_id.entry_id() < start.entry_id()
        return msg_id.entry_id() <= start.entry_id()

    def resume_before(self, first_queued: Message | None) -> None:
        """A non-durable subscription reconnects (not for a seek): start again at the first
        message still queued (which is dropped), or just after the last one handed out."""
        if self._durable or self._seek_done is not None:
            return
        if first_queued is not None:
            self.message_id = previous(first_queued.message_id().chunk_message_ids()[0])
        elif self.last_dequeued is not None:
            self.message_id = self.last_dequeued

    def subscribed(self) -> None:
        """The consumer subscribed (again): a seek waiting for that is done."""
        if self._seek_done is not None and not self._seek_done.done():
            self._seek_done.set_result(None)

    async def seek(
        self,
        request: Callable[[wire.CommandSeek], Awaitable[object]],
        consumer_id: int,
        position: MessageId | int,
        accepted: Callable[[], bool],
        timeout: float,
    ) -> None:
        """Send the SEEK to ``position`` with ``request``; once the broker accepted it,
        ``accepted()`` drops what the consumer holds and says whether it is still connected.
        Raises TimeoutError when it has not subscribed again within ``timeout`` seconds; the
        start is back where it was if the request fails."""
        previous_start = self.message_id
        body = self.seek_command(consumer_id, position)
        self._seek_done = asyncio.get_running_loop().create_future()
        try:
            await request(body)
            self.last_dequeued = None
            if accepted():
                self._seek_done.set_result(None)
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._seek_done)
        except TimeoutError:
            raise
        except BaseException:
            self.message_id = previous_start
            raise
        finally:
            self._seek_done = None

    def seek_command(self, consumer_id: int, position: MessageId | int) -> wire.CommandSeek:
        """The SEEK to a message id or a publish time (ms); the start moves there."""
        body = wire.CommandSeek(consumer_id=consumer_id, request_id=0)
        if isinstance(position, MessageId):
            target = position
            if isinstance(position, ChunkMessageId):
                first, last = position.first_chunk_message_id(), position.last_chunk_message_id()
                target = first if self._inclusive else last
            body.message_id.CopyFrom(target.to_proto(with_batch=False))
            self.message_id = target
        else:
            body.message_publish_time = int(position)
            self.message_id = None
        return body


def previous(msg_id: MessageId) -> MessageId:
    """The position just before ``msg_id``: where a reader restarts to get it again."""
    if msg_id.batch_index() >= 0:
        return MessageId(
            msg_id.partition(),
            msg_id.ledger_id(),
            msg_id.entry_id(),
            msg_id.batch_index() - 1,
            msg_id.batch_size(),
        )
    return MessageId(msg_id.partition(), msg_id.ledger_id(), msg_id.entry_id() - 1)
