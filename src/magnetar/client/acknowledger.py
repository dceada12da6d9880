"""The acknowledgement paths of one consumer.

Individual acknowledgements: an entry, every chunk of a chunked message, or a batch member
(its entry is acknowledged once all members are; with ``batch_index_ack_enabled`` each
partial acknowledgement goes as an ack set). Cumulative ones: up to an entry, or up to the
entry before a batch whose members are not all acknowledged yet. Both are grouped for
``ack_group_time_ms`` (``flush`` sends them) into as few ACK commands as possible.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.client.acks import AckGrouper, BatchAcks, ack_set_words
from magnetar.client.consumer_config import ConsumerConfig
from magnetar.client.message import ChunkMessageId, MessageId
from magnetar.client.redelivery import Redelivery
from magnetar.protocol import commands
from magnetar.protocol import pulsar_wire_pb2 as wire


class Acknowledger:
    def __init__(
        self,
        consumer_id: int,
        config: ConsumerConfig,
        redelivery: Redelivery,
        send: Callable[[wire.BaseCommand], bool],
        can_send: Callable[[], bool],
    ) -> None:
        self._consumer_id = consumer_id
        self._config = config
        self._redelivery = redelivery
        self._send = send
        self._can_send = can_send
        #: Unacknowledged members of the batch entries handed out.
        self.batches = BatchAcks()
        self._grouper = AckGrouper()

    def acknowledge(self, msg_id: MessageId) -> None:
        """Acknowledge one message (for a chunked message: every chunk)."""
        self._redelivery.acknowledged(msg_id)
        if isinstance(msg_id, ChunkMessageId):
            self.ack_ids(msg_id.chunk_message_ids())
        elif msg_id.is_batch:
            if self.batches.ack(msg_id):
                self.ack_ids([msg_id.entry_position()])
            elif self._config.batch_index_ack_enabled:
                remaining = self.batches.remaining(msg_id)
                if remaining is not None:
                    self._queue(msg_id, ack_set_words(*remaining))
        else:
            self.ack_ids([msg_id])

    def acknowledge_cumulative(self, msg_id: MessageId) -> None:
        """Acknowledge ``msg_id`` and everything before it (the caller checked it is allowed)."""
        target: MessageId | None = msg_id.entry_position()
        if msg_id.is_batch and not self.batches.is_last_unacked_up_to(msg_id):
            entry = msg_id.entry_id()
            target = MessageId(msg_id.partition(), msg_id.ledger_id(), entry - 1) if entry > 0 else None
        self._redelivery.acknowledged_up_to(msg_id)
        if target is None:
            return
        self.batches.forget_up_to(target)
        self._grouper.add_cumulative(target)

    def ack_ids(self, ids: list[MessageId]) -> None:
        """Acknowledge these entries."""
        for msg_id in ids:
            self._redelivery.entry_acknowledged(msg_id)
            self._queue(msg_id.entry_position(), None)

    def discard(
        self, data: wire.MessageIdData, validation_error: wire.CommandAck.ValidationError.ValueType
    ) -> None:
        """Acknowledge an entry that cannot be used, at once, saying why (so it is not redelivered)."""
        ack = wire.CommandAck(
            consumer_id=self._consumer_id,
            ack_type=wire.CommandAck.Individual,
            validation_error=validation_error,
        )
        ack.message_id.add(ledger_id=data.ledger_id, entry_id=data.entry_id)
        self._send(commands.wrap(ack))

    def is_duplicate(self, msg_id: MessageId) -> bool:
        """Whether ``msg_id`` is acknowledged already by an ACK not sent yet."""
        return self._grouper.is_duplicate(msg_id)

    def flush(self) -> None:
        """Send the grouped acknowledgements now (kept until the consumer is connected)."""
        if not self._grouper or not self._can_send():
            return
        for ack in self._grouper.take(self._consumer_id):
            self._send(commands.wrap(ack))

    def forget_grouped(self) -> None:
        """Drop the acknowledgements not sent yet (a seek moved past them)."""
        self._grouper.clear()

    def _queue(self, msg_id: MessageId, ack_set: list[int] | None) -> None:
        if self._grouper.add_individual(msg_id, ack_set) or self._config.ack_group_time_ms <= 0:
            self.flush()
