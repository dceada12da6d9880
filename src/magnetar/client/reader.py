"""Readers: a non-durable, exclusive subscription that starts at a chosen message id."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from magnetar.client.consumer import Consumer
from magnetar.client.consumer_config import ConsumerConfig, ConsumerType
from magnetar.client.message import ChunkMessageId, Message, MessageId

if TYPE_CHECKING:
    from magnetar.client.services import ClientServices


#: The options ``Reader`` itself takes (the others of create_reader are handled by the client).
READER_ARGUMENTS = frozenset(
    (
        "receiver_queue_size",
        "reader_name",
        "subscription_role_prefix",
        "is_read_compacted",
        "start_message_id_inclusive",
    )
)


class Reader(Consumer):
    """``read_next()`` the messages of a topic from ``start_message_id`` on.

    Like Pulsar's readers it acknowledges what it has read, cumulatively, on its non-durable
    subscription: the broker's backlog for it is then what is left to read, and on a terminated
    topic ``has_reached_end_of_topic()`` becomes true once everything is read. (Where it reads
    from after a reconnect does not depend on those acknowledgements.)
    """

    def __init__(
        self,
        client: ClientServices,
        topic: str,
        start_message_id: MessageId,
        *,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        start_message_id_inclusive: bool = False,
        subscription_name: str | None = None,
    ) -> None:
        """``subscription_name`` names its non-durable subscription (a TableView's, as the official
        client's internal subscription name); otherwise ``subscription_role_prefix`` and a random
        suffix do."""
        if not isinstance(start_message_id, MessageId):
            start_message_id = MessageId.deserialize(start_message_id.serialize())
        if isinstance(start_message_id, ChunkMessageId):
            # Its own position is the last chunk; to read it whole a reader starts at the first.
            first = start_message_id.first_chunk_message_id()
            start_message_id = (
                first if start_message_id_inclusive else start_message_id.last_chunk_message_id()
            )
        prefix = subscription_role_prefix or "reader"
        config = ConsumerConfig(
            subscription_name=subscription_name or f"{prefix}-{uuid.uuid4().hex[:10]}",
            consumer_type=ConsumerType.Exclusive,
            receiver_queue_size=receiver_queue_size,
            consumer_name=reader_name,
            is_read_compacted=is_read_compacted,
            start_message_id_inclusive=start_message_id_inclusive,
            durable=False,
            start_message_id=start_message_id,
        )
        super().__init__(client, topic, config)

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        return await self.receive(timeout_millis)

    def _message_processed(self, msg: Message) -> None:
        super()._message_processed(msg)
        # Once per entry, at its last message (the C++ client's reader acknowledges at a batch's
        # first, which leaves the topic's final batch unacknowledged).
        msg_id = msg.message_id()
        if not msg_id.is_batch or self._acks.batches.is_last_unacked_up_to(msg_id):
            self.acknowledge_cumulative_nowait(msg)

    async def has_message_available(self) -> bool:
        """Whether a message after the last one read exists on the broker."""
        if self.queued_messages:
            return True
        last = await self.get_last_message_id()
        if last.entry_id() < 0:
            return False
        read = self._start.last_dequeued
        if read is None:
            start = self._start.message_id
            if start is None or start == MessageId.earliest:
                return True
            if self.config.start_message_id_inclusive:
                return last >= start
            return last > start
        return last.entry_position() > read.entry_position() or (
            last.entry_position() == read.entry_position()
            and read.batch_index() >= 0
            and read.batch_index() < _last_index_of_batch(last, read)
        )


def _last_index_of_batch(last: MessageId, read: MessageId) -> int:
    """The batch index of the last message of ``read``'s batch, where ``last`` is in that batch: the
    broker's answer (a compacted batch's last kept message, for a readCompacted reader), or the
    batch's size where the broker names no index."""
    return last.batch_index() if last.batch_index() >= 0 else read.batch_size() - 1
