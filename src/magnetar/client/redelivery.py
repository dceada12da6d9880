"""What one consumer will have redelivered, and when: negative acknowledgements (and chunks to
redeliver later) after ``negative_ack_redelivery_delay_ms``, and messages handed out but not
acknowledged within ``unacked_messages_timeout_ms``. The consumer asks for what is due on its
timer and sends REDELIVER_UNACKNOWLEDGED_MESSAGES for it: by id on Shared / Key_Shared; on
Exclusive / Failover the broker redelivers everything unacknowledged, and the consumer epoch
goes up so that messages sent before (stamped with an older epoch) are ignored."""

from __future__ import annotations

import time

from magnetar.client.acks import RedeliveryTimer
from magnetar.client.consumer_config import ConsumerConfig
from magnetar.client.message import MessageId
from magnetar.protocol import pulsar_wire_pb2 as wire


class Redelivery:
    def __init__(self, config: ConsumerConfig) -> None:
        self._config = config
        self._nacks = RedeliveryTimer()
        self._unacked = RedeliveryTimer()
        #: Sent on SUBSCRIBE and on every redeliver-all (not on Shared / Key_Shared).
        self.epoch = 0

    def handed_out(self, msg_id: MessageId) -> None:
        """The application took ``msg_id``: start its ack timeout, if there is one."""
        timeout_ms = self._config.unacked_messages_timeout_ms
        if timeout_ms > 0:
            self._unacked.add(msg_id, time.monotonic() + timeout_ms / 1000)

    def acknowledged(self, msg_id: MessageId) -> None:
        """The application acknowledged the message ``msg_id``: its ack timeout stops."""
        self._unacked.remove(msg_id)

    def entry_acknowledged(self, msg_id: MessageId) -> None:
        """The entry of ``msg_id`` is acknowledged: no negative ack of it stands."""
        self._nacks.remove(msg_id)

    def acknowledged_up_to(self, msg_id: MessageId) -> None:
        self._unacked.remove_up_to(msg_id)
        self._nacks.remove_up_to(msg_id)

    def negative_acknowledge(self, msg_id: MessageId) -> None:
        """Redeliver the message (every chunk of a chunked one) after the negative-ack delay."""
        self._unacked.remove(msg_id)
        when = self._nack_due()
        for chunk_id in msg_id.chunk_message_ids():
            self._nacks.add(chunk_id, when)

    def later(self, ids: list[MessageId]) -> None:
        """Chunks to redeliver after the negative-ack delay (a reader, non-durable, only drops them)."""
        if not ids or not self._config.durable:
            return
        when = self._nack_due()
        for msg_id in ids:
            self._nacks.add(msg_id, when)

    def take_due(self, now: float) -> list[MessageId]:
        """The ids due by ``now`` (monotonic seconds), sorted, each once; they are forgotten."""
        due = self._nacks.take_due(now) + self._unacked.take_due(now)
        return sorted(set(due))

    def clear(self) -> None:
        self._nacks.clear()
        self._unacked.clear()

    def command(self, consumer_id: int, ids: list[MessageId]) -> wire.CommandRedeliverUnacknowledgedMessages:
        """The REDELIVER of ``ids`` (Shared / Key_Shared)."""
        body = wire.CommandRedeliverUnacknowledgedMessages(consumer_id=consumer_id)
        body.message_ids.extend(i.to_proto(with_batch=False) for i in ids)
        return body

    def command_for_all(self, consumer_id: int) -> wire.CommandRedeliverUnacknowledgedMessages:
        """The REDELIVER of everything unacknowledged: nothing stays due, the epoch goes up."""
        self.epoch += 1
        self.clear()
        body = wire.CommandRedeliverUnacknowledgedMessages(consumer_id=consumer_id)
        if not self._config.shared:
            body.consumer_epoch = self.epoch
        return body

    def _nack_due(self) -> float:
        return time.monotonic() + self._config.negative_ack_redelivery_delay_ms / 1000
