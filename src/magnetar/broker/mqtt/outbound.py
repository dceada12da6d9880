"""What an MQTT client is sent: its consumers' entries as PUBLISH packets, and the QoS 1 and 2
flows back (PUBACK; PUBREC, PUBREL, PUBCOMP).

Each topic a client's filters match has one ``MqttConsumer`` on a subscription named after the
client id (as Pulsar's MQTT handler names it), Exclusive. Its dispatcher hands it entries within
its permits; every message of an entry goes out at the QoS granted. A QoS 0 entry is
acknowledged once written; a QoS 1 or 2 one once the client acknowledged each of its messages
(PUBACK, PUBCOMP), and only then does its consumer get the permits back: the messages not yet
acknowledged by the client are what a client's flow holds, bounded by ``PERMITS``. No more than
the client's Receive Maximum (5.0; 100 for 3.1.1) are in flight at once: the rest wait here, in
order, for packet identifiers.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.broker.consumer import Consumer
from magnetar.broker.entries import DispatchEntry
from magnetar.broker.mqtt.chunks import ChunkedMessages
from magnetar.broker.mqtt.messages import from_entry
from magnetar.protocol import wire
from magnetar.protocol.chunks import chunk_ref
from magnetar.protocol.message_id import to_u64
from magnetar.protocol.mqtt import MQTT_5, Properties, Publish, PubRec, PubRel, encode
from magnetar.protocol.mqtt.codes import PacketType
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection
    from magnetar.broker.topic_api import Subscription

log = logging.getLogger(__name__)

#: Messages a consumer may hold unacknowledged by the client (its flow permits).
PERMITS = 1000


class MqttConsumer(Consumer):
    """A consumer whose entries become MQTT PUBLISH packets of its connection."""

    __slots__ = ("mqtt_topic", "no_local", "qos")

    def __init__(
        self,
        cnx: MqttConnection,
        subscription: Subscription[Consumer],
        consumer_id: int,
        name: str,
        mqtt_topic: str,
        qos: int,
        no_local: bool,
    ) -> None:
        super().__init__(cnx, subscription, consumer_id, name)
        #: The Topic Name its messages carry.
        self.mqtt_topic = mqtt_topic
        #: The QoS granted: the highest of the client's filters matching the topic.
        self.qos = qos
        #: Leave out the client's own messages (5.0's No Local, on every filter matching).
        self.no_local = no_local

    def send_entries(
        self,
        entries: list[DispatchEntry],
        redelivery_counts: dict[Position, int],
        ack_sets: Callable[[Position], list[int] | None] | None = None,
    ) -> None:
        cnx: MqttConnection = self.cnx  # type: ignore[assignment]  # made with one
        messages = size = 0
        for entry in entries:
            messages += entry.num_messages
            size += len(entry.data)
            cnx.outbound.deliver(self, entry)
        self.permits -= messages
        subscription = self.subscription
        for traffic in (self.traffic, subscription.traffic, subscription.topic.traffic):
            traffic.messages_out += messages
            traffic.bytes_out += size


@dataclass(slots=True)
class EntryAcks:
    """An entry whose messages went out at QoS 1 or 2: acknowledged once none is left."""

    consumer: MqttConsumer
    position: Position
    messages: int
    left: int


@dataclass(slots=True)
class InFlight:
    packet: Publish
    entry: EntryAcks
    #: QoS 2: the client sent PUBREC and was sent PUBREL.
    released: bool = False


class Outbound:
    def __init__(self, cnx: MqttConnection) -> None:
        self.cnx = cnx
        self.in_flight: dict[int, InFlight] = {}
        #: Messages waiting for room under the client's Receive Maximum.
        self.waiting: deque[tuple[Publish, EntryAcks]] = deque()
        self._next_id = 0
        #: Chunked messages being put together (chunks.py).
        self.chunks = ChunkedMessages(_drop_chunk, cnx.config.mqtt_message_max_length)

    def deliver(self, consumer: MqttConsumer, entry: DispatchEntry) -> None:
        cnx = self.cnx
        if chunk_ref(entry.metadata) is not None:  # one chunk of a large message (chunks.py)
            whole = self.chunks.take(consumer, entry)
            if whole is None:
                return
            entry = whole
        messages = from_entry(entry)
        session = cnx.session
        if (
            messages is None
            or session is None
            or (
                consumer.no_local
                and entry.metadata is not None
                and entry.metadata.producer_name == session.producer_name
            )
        ):
            done(consumer, entry.position, entry.num_messages)
            return
        v5 = cnx.version == MQTT_5
        qos = consumer.qos
        acks = EntryAcks(consumer, entry.position, entry.num_messages, 0)
        for message in messages:
            properties = (
                Properties(user_properties=message.properties) if v5 and message.properties else Properties()
            )
            packet = Publish(consumer.mqtt_topic, message.payload, qos, properties=properties)
            if cnx.client_max_packet and len(encode(packet, cnx.version)) > cnx.client_max_packet:
                continue  # 5.0: never sent past the client's Maximum Packet Size (3.1.2.11.4)
            if qos == 0:
                cnx.send(packet)
            else:
                acks.left += 1
                self.waiting.append((packet, acks))
        if acks.left == 0:
            done(consumer, entry.position, entry.num_messages)
        else:
            self._send_waiting()

    def _send_waiting(self) -> None:
        cnx = self.cnx
        while self.waiting and len(self.in_flight) < cnx.receive_maximum:
            packet, acks = self.waiting.popleft()
            if acks.consumer.closed:
                continue
            packet_id = self._packet_id()
            sent = Publish(
                packet.topic, packet.payload, packet.qos, packet_id=packet_id, properties=packet.properties
            )
            self.in_flight[packet_id] = InFlight(sent, acks)
            cnx.send(sent)

    def _packet_id(self) -> int:
        for _ in range(65535):
            self._next_id = self._next_id % 65535 + 1
            if self._next_id not in self.in_flight:
                return self._next_id
        raise RuntimeError("no packet identifier free")  # in flight is bounded far below 65535

    def received(self, packet: PubRec) -> None:
        """PUBREC of a QoS 2 message: PUBREL (or, for a refusal, the message is done)."""
        flight = self.in_flight.get(packet.packet_id)
        if flight is None or flight.packet.qos != 2:
            self.cnx.send(PubRel(packet.packet_id, 0x92 if self.cnx.version == MQTT_5 else 0))
            return
        if packet.reason_code >= 0x80:
            self.acknowledged(packet.packet_id, PacketType.PUBREC, packet.reason_code)
            return
        flight.released = True
        self.cnx.send(PubRel(packet.packet_id))

    def acknowledged(self, packet_id: int, kind: PacketType, reason: int) -> None:
        """PUBACK (QoS 1) or PUBCOMP (QoS 2): the message is done; an unknown packet identifier is
        ignored (a late acknowledgement after a reconnect)."""
        flight = self.in_flight.get(packet_id)
        if flight is None:
            return
        qos = flight.packet.qos
        if not ((qos == 1 and kind is PacketType.PUBACK) or (qos == 2 and kind is not PacketType.PUBACK)):
            return
        del self.in_flight[packet_id]
        acks = flight.entry
        acks.left -= 1
        if acks.left == 0:
            done(acks.consumer, acks.position, acks.messages)
        self._send_waiting()

    def forget(self, consumer: MqttConsumer) -> None:
        """``consumer`` is gone: what it had in flight is no longer waited for."""
        for packet_id in [pid for pid, flight in self.in_flight.items() if flight.entry.consumer is consumer]:
            del self.in_flight[packet_id]


def done(consumer: MqttConsumer, position: Position, messages: int) -> None:
    """Acknowledge the entry on the subscription and give its permits back."""
    if consumer.closed:
        return
    outbound: Outbound = consumer.cnx.outbound  # type: ignore[attr-defined]  # an MqttConnection
    message_ids = [
        wire.MessageIdData(ledger_id=to_u64(one.ledger_id), entry_id=to_u64(one.entry_id))
        for one in outbound.chunks.positions(consumer, position)  # a chunked message: all its chunks
    ]
    ack = wire.CommandAck(
        consumer_id=consumer.consumer_id, ack_type=wire.CommandAck.Individual, message_id=message_ids
    )
    subscription = consumer.subscription
    subscription.acknowledge(ack, consumer)
    subscription.flow(consumer, messages)


def _drop_chunk(consumer: Consumer, position: Position) -> None:
    """A chunk that will never make a message: acknowledged, its permit given back."""
    if isinstance(consumer, MqttConsumer):
        done(consumer, position, 1)
