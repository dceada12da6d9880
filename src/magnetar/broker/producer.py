"""A producer attached to a topic through one client connection.

Receipts leave in the order the sends came in, whatever order their outcomes are known
in (a duplicate is known at once, a stored message only after its fsync): the client
closes the connection on a receipt it does not expect next.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.broker.replication import is_replicator_producer
from magnetar.broker.traffic import Traffic
from magnetar.protocol import wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.hot_frames import send_receipt_frame
from magnetar.protocol.message_id import to_u64
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.topic_api import Topic
    from magnetar.broker.transport_cnx import TransportCnx

#: The message id a duplicate send is answered with (Pulsar's choice).
DUPLICATE = Position(-1, -1)
#: A producer's metadata property (PRODUCER) asking for deduplication whatever the namespace says:
#: the MQTT worker's producers on topics another worker owns (QoS 2 is exactly once through it,
#: broker/mqtt/remote.py). It only makes the broker stricter with that producer's own messages.
DEDUPLICATED_PROPERTY = "magnetar.deduplicated"


@dataclass(slots=True)
class PendingSend:
    sequence_id: int
    highest_sequence_id: int
    position: Position | None = None
    error: tuple[int, str] | None = None
    #: Storage refused or failed it (see ``Producer.not_stored``).
    unstored: bool = False

    @property
    def done(self) -> bool:
        return self.position is not None or self.error is not None or self.unstored


class Producer:
    def __init__(
        self,
        cnx: TransportCnx,
        topic: Topic[Producer],
        producer_id: int,
        name: str,
        user_provided_name: bool,
        access_mode: int = wire.Shared,
    ) -> None:
        self.cnx = cnx
        self.topic = topic
        self.producer_id = producer_id
        self.name = name
        #: A geo-replicator's producer: deduplicated whatever the namespace says.
        self.replicator = is_replicator_producer(name)
        #: Deduplicated whatever the namespace says: a geo-replicator's, and the MQTT handler's
        #: (QoS 2 is exactly once through deduplication).
        self.deduplicated = self.replicator
        self.user_provided_name = user_provided_name
        self.access_mode = access_mode
        self.closed = False
        #: This producer's messages and bytes in (its ``_out`` fields stay zero).
        self.traffic = Traffic()
        #: The schema version answered in PRODUCER_SUCCESS (8 bytes), None without a schema.
        self.schema_version: bytes | None = None
        self._pending: deque[PendingSend] = deque()
        #: A send of this producer could not be stored: later ones are not tried (see ``not_stored``).
        self.refusing_sends = False
        #: Called with this producer once a WaitForExclusive producer gets the topic (set by the
        #: connection; given the producer rather than holding it, so the two make no cycle).
        self.on_ready: Callable[[Producer], None] = lambda producer: None

    def fence(self) -> None:
        """Another producer took exclusive access with fencing: close this one (the client
        reconnects, and is refused while the fencing producer holds the topic)."""
        self.close_by_broker()

    def close_by_broker(self) -> None:
        """Drop this producer from the broker's side; its client reconnects (and may be refused)."""
        self.topic.remove_producer(self)
        self.closed = True
        self.cnx.close_producer_by_broker(self.producer_id, self)

    def expect(self, sequence_id: int, highest_sequence_id: int) -> PendingSend:
        """Reserve the receipt slot of a send, in arrival order."""
        pending = PendingSend(sequence_id, highest_sequence_id)
        self._pending.append(pending)
        return pending

    def complete(
        self, pending: PendingSend, position: Position | None, error: tuple[int, str] | None
    ) -> None:
        pending.position, pending.error = position, error
        self._drain()

    def not_stored(self, pending: PendingSend) -> None:
        """Storage refused or failed this send (a full disk, a failed fsync): close the producer
        once the receipts of the sends before it are out, and answer none after it.

        Not a SEND_ERROR: on any SEND_ERROR but ChecksumError the official clients close the
        whole connection and resend at once, and each successful reconnect restarts their send
        timeout, so a send on a full disk never returned. On CLOSE_PRODUCER only this producer
        reconnects; while the topic cannot be written its re-creation is refused with
        ProducerBlockedQuotaExceededException (topic.add_producer), which makes the client fail
        its pending sends at once and retry with backoff; once there is room it reconnects and
        resends what it still holds. Sends after this one are not stored either (a stored one
        left unreceipted would be stored twice by that resend)."""
        pending.unstored = True
        self.refusing_sends = True
        self._drain()

    def _drain(self) -> None:
        while self._pending and self._pending[0].done:
            pending = self._pending.popleft()
            if pending.unstored:
                self._pending.clear()
                if not self.closed:
                    self.close_by_broker()
                return
            self._reply(pending)

    def _reply(self, pending: PendingSend) -> None:
        if pending.error is not None:
            code, message = pending.error
            reply = wire.CommandSendError(
                producer_id=self.producer_id,
                sequence_id=pending.sequence_id,
                error=wire.ServerError.ValueType(code),
                message=message,
            )
            self.cnx.send_command(wrap(reply))
            return
        position = pending.position
        assert position is not None  # done, neither failed nor unstored: stored
        self.cnx.write_many(
            [
                send_receipt_frame(
                    self.producer_id,
                    pending.sequence_id,
                    to_u64(position.ledger_id),
                    to_u64(position.entry_id),
                    pending.highest_sequence_id,
                )
            ]
        )

    def __repr__(self) -> str:
        return f"Producer({self.name!r}, id={self.producer_id}, topic={self.topic.name})"
