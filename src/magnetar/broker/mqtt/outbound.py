"""What an MQTT client is sent: its consumers' entries as PUBLISH packets, and the QoS 1 and 2
flows back (PUBACK; PUBREC, PUBREL, PUBCOMP).

Each topic a client's filters match has one ``MqttConsumer`` per Pulsar subscription it takes
messages from (``subscriptions.py``). Its dispatcher hands it entries within its permits; every
message of an entry goes out at the QoS granted, or at the QoS it was published with where that is
lower (``Outgoing.qos``). An entry whose messages all went at QoS 0 is acknowledged once written;
one with a QoS 1 or 2 message once the client has each of its messages (PUBACK; PUBREC, after which the
message is the client's and is never sent again, 4.3.3), and only then does its consumer get the
permits back: the messages not yet acknowledged by the client are what a client's flow holds,
bounded by ``PERMITS`` for the connection as a whole, however many topics its filters match
(``grant``: each consumer gets a share, one at least, so none starves; permits that come back go
first to the consumers that ran out, in turn). No more than the client's Receive Maximum (5.0;
100 for 3.1.1) are in flight (PUBLISH sent, PUBACK or PUBCOMP not yet come) at once: the rest
wait here, in order, for packet identifiers.

Whether a message may go to this client at all is decided in one place, ``_admit``, before it is
given a packet identifier or Topic Alias: a property MQTT cannot encode is left out; a message
whose Topic Name cannot be one, or that is past the client's Maximum Packet Size (5.0,
3.1.2.11.4), is discarded for this client as if delivered (its entry acknowledged, so a durable
session moves past it), logged and counted; nothing ends the connection for it.

Packet identifiers belong to the session: a message sent and not acknowledged keeps its
identifier, and when the session resumes on a new connection (its durable subscription sends
the message again) it goes out under the same one with DUP set; a PUBREL not answered is sent
again (4.4). A durable session's PUBREL goes once its record holds the identifier
(session_store.py), so a restart, even a ``kill -9``, sends it again too; and so does its QoS 2
PUBLISH under a new identifier (``_hold_for_record``: one record write for those of a loop
pass, what the connection sends after them held behind them), so that after a ``kill -9`` one
the client may hold unanswered comes again under its identifier, never as a new message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.broker import loop_pass
from magnetar.broker.consumer import Consumer
from magnetar.broker.entries import DispatchEntry
from magnetar.broker.mqtt import publishes
from magnetar.broker.mqtt.chunks import ChunkedMessages
from magnetar.broker.mqtt.session import AckedOnDisk, MessageKey
from magnetar.broker.subscription_type import SubscriptionType
from magnetar.protocol import wire
from magnetar.protocol.message_id import to_u64
from magnetar.protocol.mqtt import MQTT_5, Publish, PubRec, PubRel, ReasonCode, encode
from magnetar.protocol.mqtt.codes import PacketType
from magnetar.protocol.mqtt.sendable import MAX_U32, sendable
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection
    from magnetar.broker.topic_api import Subscription

log = logging.getLogger(__name__)

#: Messages a connection's consumers may hold unacknowledged by the client, all together (their
#: flow permits; at least one per consumer).
PERMITS = 1000
#: At most this many given a consumer at once: one running out gets more while the connection
#: is under ``PERMITS``, so a single busy topic still gets them all, and many share them.
GRANT = 100


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Delivery:
    """How one consumer's messages go out: the options of the client's filters matching its topic.

    Made by ``delivery``, which gives the consumers that deliver alike one object: the key
    under which an entry's packets are encoded once for all of them (``publishes.py``)."""

    #: The Topic Name its messages carry.
    mqtt_topic: str
    #: The QoS granted: the highest of the client's filters matching the topic.
    qos: int
    #: Leave out the client's own messages (5.0's No Local, on every filter matching).
    no_local: bool = False
    #: Keep the RETAIN flag a message was published with (5.0's Retain As Published).
    retain_as_published: bool = False
    #: The Subscription Identifiers of the matching filters (5.0).
    subscription_ids: tuple[int, ...] = ()


_DELIVERIES: weakref.WeakValueDictionary[tuple[str, int, bool, bool, tuple[int, ...]], Delivery] = (
    weakref.WeakValueDictionary()
)


def delivery(
    mqtt_topic: str,
    qos: int,
    no_local: bool = False,
    retain_as_published: bool = False,
    subscription_ids: tuple[int, ...] = (),
) -> Delivery:
    """The one ``Delivery`` of these options (while a consumer holds it)."""
    key = (mqtt_topic, qos, no_local, retain_as_published, subscription_ids)
    found = _DELIVERIES.get(key)
    if found is None:
        found = _DELIVERIES[key] = Delivery(*key)
    return found


class MqttConsumer(Consumer):
    """A consumer whose entries become MQTT PUBLISH packets of its connection."""

    __slots__ = ("delivery", "granted", "group", "starving")
    takes_frames = False
    joins_at_tail = True

    def __init__(
        self,
        cnx: MqttConnection,
        subscription: Subscription[Consumer],
        consumer_id: int,
        name: str,
        delivery: Delivery,
        group: str | None,
    ) -> None:
        super().__init__(cnx, subscription, consumer_id, name)
        self.delivery = delivery
        #: The share name of a shared subscription (``$share/{group}/...``); None otherwise.
        self.group = group
        #: Permits given it and not yet come back (``Outbound.grant``).
        self.granted = 0
        #: It ran out of permits and waits in ``Outbound.hungry`` for more.
        self.starving = False

    @property
    def connection_lost(self) -> bool:
        """What an MQTT client may get back is its session's business (durable subscriptions),
        never a broadcast virtual cursor kept for a reconnect."""
        return False

    def watch(self, position: Position) -> AckedOnDisk | None:
        """Where the acknowledgement of the entry at ``position`` is seen to be on disk, for a QoS 2
        message of it that the client PUBREC'd (session.py): its subscription's durable cursor
        here; None where there is none."""
        return cursor_of(self)

    def send_entries(
        self,
        entries: list[DispatchEntry],
        redelivery_counts: dict[Position, int],
        ack_sets: Callable[[Position], list[int] | None] | None = None,
    ) -> None:
        messages, size = self.send_own_way(entries)
        subscription = self.subscription
        for traffic in (subscription.traffic, subscription.topic.traffic):
            traffic.messages_out += messages
            traffic.bytes_out += size

    def send_own_way(self, entries: list[DispatchEntry]) -> tuple[int, int]:
        """Each entry as PUBLISH packets. The permits of an entry done with at once (QoS 0, or
        nothing of it to send) are not charged: it is acknowledged here, and its permits would
        only come back at once."""
        cnx: MqttConnection = self.cnx  # type: ignore[assignment]  # made with one
        deliver = cnx.outbound.deliver
        messages = size = charged = 0
        for entry in entries:
            count = entry.num_messages
            messages += count
            size += len(entry.data)
            try:
                if not deliver(self, entry):
                    charged += count
            except Exception:  # this client's failure, never its dispatcher's (others share it)
                log.exception("%s: delivering %s failed; closing the connection", cnx.remote, entry.position)
                cnx.close_with(ReasonCode.UNSPECIFIED_ERROR)
                break
        self.permits -= charged
        traffic = self.traffic
        traffic.messages_out += messages
        traffic.bytes_out += size
        if self.permits <= 0:
            cnx.outbound.starved(self)
        return messages, size


class MqttConsumerFromStart(MqttConsumer):
    """One that joins its broadcast subscription where the subscription is, not at the end of the
    topic: a topic another worker created a moment ago, whose first messages are for it too (a
    topic created here is attached to as it loads, before its first message)."""

    __slots__ = ()
    joins_at_tail = False


@dataclass(slots=True)
class EntryAcks:
    """An entry whose messages went out at QoS 1 or 2: acknowledged once none is left."""

    consumer: MqttConsumer
    position: Position
    messages: int
    left: int


@dataclass(slots=True)
class InFlight:
    qos: int
    #: The entry it came from (None: a retained message, or its consumer is gone).
    entry: EntryAcks | None
    #: QoS 2: the client sent PUBREC and was sent PUBREL.
    released: bool = False


@dataclass(slots=True)
class Waiting:
    qos: int
    #: The packet (None when ``encoded`` holds it).
    packet: Publish | None
    entry: EntryAcks | None
    key: MessageKey | None
    #: When it expires (seconds since the epoch): it may while it waits.
    expires_at: int | None = None
    #: The packet as encoded for every subscriber alike: the bytes around its packet identifier
    #: (``publishes.py``).
    encoded: tuple[bytes, bytes] | None = None


class Outbound:
    """What the connection's client is sent. Slotted, and what most clients never need (a
    queue of messages waiting for packet identifiers, Topic Aliases, chunked messages) is made
    when first needed: a broker holds many idle connections."""

    __slots__ = (
        "_aliases",
        "_chunks",
        "_next_id",
        "_recording",
        "cnx",
        "given",
        "hungry",
        "in_flight",
        "waiting",
    )

    def __init__(self, cnx: MqttConnection) -> None:
        self.cnx = cnx
        self.in_flight: dict[int, InFlight] = {}
        #: Messages waiting for room under the client's Receive Maximum (None: none yet).
        self.waiting: deque[Waiting] | None = None
        self._next_id = 0
        #: Topic Name -> the Topic Alias given it on this connection (5.0, 3.3.2.3.4).
        self._aliases: dict[str, int] | None = None
        #: Chunked messages being put together (chunks.py).
        self._chunks: ChunkedMessages | None = None
        #: Flow permits given to this connection's consumers and not come back (about ``PERMITS``).
        self.given = 0
        #: Consumers out of permits, in the order they ran out: the next ones to get some (None:
        #: none has yet).
        self.hungry: deque[MqttConsumer] | None = None
        #: Done once the session's record holds the packet identifiers given in this loop pass
        #: to QoS 2 PUBLISHes (None: none is waiting for it).
        self._recording: asyncio.Future[None] | None = None

    # -- flow permits: bounded per connection ------------------------------------------------------
    def _share(self) -> int:
        """What one consumer is given: an equal part of ``PERMITS`` (``GRANT`` at most), no more
        than is left, one at least (so that every consumer moves: the bound is then ``PERMITS``
        or one per consumer)."""
        return max(1, min(PERMITS - self.given, PERMITS // max(1, len(self.cnx.consumers)), GRANT))

    def _give(self, consumer: MqttConsumer, permits: int) -> None:
        consumer.granted += permits
        self.given += permits
        consumer.subscription.flow(consumer, permits)

    def grant(self, consumer: MqttConsumer) -> None:
        """A new consumer of this connection: its first permits."""
        self._give(consumer, self._share())

    def starved(self, consumer: MqttConsumer) -> None:
        """``consumer`` used its permits: it waits for more, in turn."""
        if not consumer.starving:
            consumer.starving = True
            self._hungry().append(consumer)
        self._refill(at_least_one=False)

    def returned(self, consumer: MqttConsumer, permits: int) -> None:
        """An entry of ``consumer`` was acknowledged: its permits come back to the connection."""
        consumer.granted -= permits
        self.given -= permits
        if consumer.permits <= 0 and not consumer.starving:
            consumer.starving = True
            self._hungry().append(consumer)
        self._refill(at_least_one=True)

    def _hungry(self) -> deque[MqttConsumer]:
        if self.hungry is None:
            self.hungry = deque()
        return self.hungry

    def _refill(self, at_least_one: bool) -> None:
        """Permits to the consumers that ran out, in turn, while the connection is under
        ``PERMITS``; after permits came back, to one of them at least (so none waits for ever)."""
        hungry = self.hungry
        if hungry is None:
            return
        while hungry and (at_least_one or self.given < PERMITS):
            consumer = hungry.popleft()
            consumer.starving = False
            if (
                consumer.closed
                or consumer.permits > 0
                or self.cnx.consumers.get(consumer.consumer_id) is not consumer
            ):
                continue  # gone (or forgotten), or given some meanwhile
            at_least_one = False
            self._give(consumer, self._share())

    @property
    def aliases(self) -> dict[str, int]:
        if self._aliases is None:
            self._aliases = {}
        return self._aliases

    @property
    def chunks(self) -> ChunkedMessages:
        if self._chunks is None:
            self._chunks = ChunkedMessages(_drop_chunk, self.cnx.config.mqtt_message_max_length)
        return self._chunks

    def positions(self, consumer: MqttConsumer, position: Position) -> list[Position] | None:
        """Every chunk of the whole message handed out at ``position``; None for an entry of its own."""
        if self._chunks is None:
            return None
        found = self._chunks.positions(consumer, position)
        return None if found == [position] else found

    def _send(self, packet: Publish) -> None:
        """Send a PUBLISH, under a Topic Alias where the client takes them: the first one to a
        topic sets it (name and alias), later ones carry the alias alone."""
        cnx = self.cnx
        if cnx.client_alias_maximum and packet.topic:
            aliases = self.aliases
            alias = aliases.get(packet.topic)
            if alias is not None:
                packet = dataclasses.replace(
                    packet, topic="", properties=packet.properties.replace(topic_alias=alias)
                )
            elif len(aliases) < cnx.client_alias_maximum:
                alias = aliases[packet.topic] = len(aliases) + 1
                packet = dataclasses.replace(packet, properties=packet.properties.replace(topic_alias=alias))
        cnx.send(packet)

    def _shaped(self, packet: Publish) -> Publish:
        """``packet`` as ``_send`` would send it now (or larger, never smaller: a Topic Alias it
        would set is counted with the Topic Name, which later ones leave out)."""
        cnx = self.cnx
        if cnx.client_alias_maximum and packet.topic:
            alias = self.aliases.get(packet.topic)
            if alias is not None:
                return dataclasses.replace(
                    packet, topic="", properties=packet.properties.replace(topic_alias=alias)
                )
            if len(self.aliases) < cnx.client_alias_maximum:
                return dataclasses.replace(packet, properties=packet.properties.replace(topic_alias=0xFFFF))
        return packet

    def _admit(self, packet: Publish) -> Publish | None:
        """Whether, and as what, ``packet`` may go to this client: the one check, made before a
        packet identifier or Topic Alias is taken for it (see the module's docstring). None: it
        never goes to this client."""
        cnx = self.cnx
        fitted, problems = sendable(packet)
        if fitted is not None and cnx.client_max_packet:
            size = _size(self._shaped(fitted), cnx.version)
            if size > cnx.client_max_packet:
                problems.append(
                    f"{size} bytes, past the client's Maximum Packet Size {cnx.client_max_packet}"
                )
                fitted = None
        if problems:
            cnx.server.unsendable += 1
            log.info(
                "%s: a message to %r %s: %s",
                cnx.remote,
                packet.topic[:200],
                "left out of its properties what MQTT cannot carry" if fitted else "is not sent",
                "; ".join(problems),
            )
        return fitted

    def resume(self) -> None:
        """The session resumed on this connection: its PUBRELs not answered go again (4.4)."""
        session = self.cnx.session
        if session is None:
            return
        for packet_id in sorted(session.released):
            self.in_flight[packet_id] = InFlight(2, None, released=True)
            self.cnx.send(PubRel(packet_id))

    def deliver(self, consumer: MqttConsumer, entry: DispatchEntry) -> bool:
        """Send ``entry``'s messages; True when it is done with already (acknowledged, its
        permits not charged), False when they come back later: its QoS 1 or 2 messages wait
        for the client, or it is a chunk (the whole message gives back the permits of all)."""
        prepared = publishes.prepared(entry)
        if not prepared.chunk:
            return self._deliver(consumer, entry, prepared)
        whole = self.chunks.take(consumer, entry)  # one chunk of a large message (chunks.py)
        if (
            whole is not None
            and self._deliver(consumer, whole, publishes.prepared(whole))
            and not consumer.closed
        ):
            consumer.subscription.flow(consumer, whole.num_messages)  # acknowledged: the chunks' permits
        return False

    def _deliver(
        self, consumer: MqttConsumer, entry: DispatchEntry, prepared: publishes.EntryPublishes
    ) -> bool:
        cnx = self.cnx
        session = cnx.session
        how = consumer.delivery
        messages = prepared.messages
        metadata = entry.metadata
        if (
            messages is None
            or session is None
            or (how.no_local and metadata is not None and metadata.producer_name == session.producer_name)
        ):
            acknowledge(consumer, entry.position)
            return True
        version = cnx.version
        encoded = prepared.encoded(version, how)
        granted = how.qos
        max_packet = cnx.client_max_packet
        aliases = cnx.client_alias_maximum
        acks: EntryAcks | None = None
        now = 0.0
        position = entry.position
        topic = ""
        once = session.durable and session.any_delivered()
        holders = None  # the other members of its group that received QoS 2 messages of the topic
        if consumer.group is not None and (sessions := cnx.server.sessions).group_delivered:
            topic = str(consumer.subscription.topic.name)
            holders = sessions.group_holders(topic, consumer.group)
        for index, message in enumerate(messages):
            if once or holders:
                # A QoS 2 message the client (or, of a group, a member) PUBREC'd before a
                # restart, handed out again because its acknowledgement had not reached the
                # disk: it is the client's (the group's) already.
                topic = topic or str(consumer.subscription.topic.name)
                key = (topic, position.ledger_id, position.entry_id, index)
                if (once and session.was_delivered(key)) or (
                    holders and any(holder.was_delivered(key) for holder in holders)
                ):
                    if session.durable:
                        # Kept until this handing out's acknowledgement is on disk (its entry
                        # is acknowledged once the rest of it is done with).
                        session.delivered(key, consumer.watch(position))
                    continue
            data = encoded[index]
            qos = min(granted, message.qos)  # never above the QoS it was published with (3.3.5, 3.8.4)
            parts: tuple[bytes, bytes] | None = None
            packet: Publish | None = None
            if data is None or aliases or (qos == 0 and self.waiting):
                # It expires, goes under a Topic Alias, or waits behind QoS 1 and 2 messages
                # (a topic's order is kept, 4.6): its own packet.
                expires_in = None
                if message.expires_at is not None:
                    now = now or time.time()
                    if message.expires_at <= now:
                        continue  # expired before it could go: deleted for this subscriber (3.3.2.3.3)
                    expires_in = min(max(math.ceil(message.expires_at - now), 1), MAX_U32)  # what is left
                packet = self._admit(publishes.packet(version, how, message, expires_in))
                if packet is None:
                    continue  # discarded for this client as if delivered (see ``_admit``)
                if qos == 0 and not self.waiting:
                    self._send(packet)
                    continue
                if qos == 0:
                    assert self.waiting is not None
                    self.waiting.append(Waiting(0, packet, None, None, message.expires_at))
                    continue
            elif isinstance(data, bytes):  # QoS 0, the usual case
                if not max_packet or len(data) <= max_packet:
                    cnx.send_bytes(data)
                continue
            else:
                parts = data
                if max_packet and len(parts[0]) + 2 + len(parts[1]) > max_packet:
                    continue
            if acks is None:
                acks = EntryAcks(consumer, position, entry.num_messages, 0)
                topic = str(consumer.subscription.topic.name)
            acks.left += 1
            key = (topic, position.ledger_id, position.entry_id, index)
            if parts is not None and not self.waiting and len(self.in_flight) < cnx.receive_maximum:
                self._send_parts(qos, acks, key, parts)  # nothing waits before it: at once
                continue
            if self.waiting is None:
                self.waiting = deque()
            self.waiting.append(Waiting(qos, packet, acks, key, message.expires_at, parts))
        if acks is None:
            acknowledge(consumer, entry.position)
            return True
        self._send_waiting()
        return False

    def send_alone(self, packet: Publish) -> None:
        """A message of no entry (a retained one, at SUBSCRIBE): sent at its own QoS."""
        admitted = self._admit(packet)
        if admitted is None:
            return
        packet = admitted
        if packet.qos == 0:
            self._send(packet)
            return
        if self.waiting is None:
            self.waiting = deque()
        self.waiting.append(Waiting(packet.qos, packet, None, None))
        self._send_waiting()

    def _send_waiting(self) -> None:
        cnx = self.cnx
        session = cnx.session
        waiting_all = self.waiting
        while waiting_all and len(self.in_flight) < cnx.receive_maximum:
            waiting = waiting_all.popleft()
            acks = waiting.entry
            if acks is not None and acks.consumer.closed:
                continue
            packet, key = waiting.packet, waiting.key
            if waiting.expires_at is not None:
                left = math.ceil(waiting.expires_at - time.time())
                if left <= 0:  # expired while it waited: not sent (3.3.2.3.3)
                    self._entry_done(InFlight(waiting.qos, acks))
                    continue
                if cnx.version == MQTT_5 and packet is not None:
                    packet = dataclasses.replace(
                        packet,
                        properties=packet.properties.replace(message_expiry_interval=min(left, MAX_U32)),
                    )
            if waiting.qos == 0:  # it waited only for those before it to go
                assert packet is not None
                self._send(packet)
                continue
            if packet is None:
                assert waiting.encoded is not None
                self._send_parts(waiting.qos, acks, key, waiting.encoded)
                continue
            dup = False
            packet_id = None
            if session is not None and key is not None:
                known = session.unacked.get(key)
                if known is not None and known not in self.in_flight:
                    packet_id, dup = known, True  # sent before this session resumed: again, as it was
            if packet_id is None:
                packet_id = self._packet_id()
            if session is not None and key is not None and session.sent(key, packet_id, waiting.qos):
                self._hold_for_record()
            self.in_flight[packet_id] = InFlight(waiting.qos, acks)
            self._send(
                Publish(
                    packet.topic, packet.payload, packet.qos, packet.retain, dup, packet_id, packet.properties
                )
            )

    def _send_parts(
        self, qos: int, acks: EntryAcks | None, key: MessageKey | None, parts: tuple[bytes, bytes]
    ) -> None:
        """A QoS 1 or 2 PUBLISH encoded for every subscriber alike (``publishes.py``): its packet
        identifier (and DUP) goes between the bytes before and after it. One the session sent
        before it resumed goes again under the identifier it had, with DUP set (4.4)."""
        session = self.cnx.session
        in_flight = self.in_flight
        packet_id = None
        head, tail = parts
        if session is not None and key is not None:
            known = session.unacked.get(key)
            if known is not None and known not in in_flight:
                packet_id = known  # sent before this session resumed: again, as it was
                head = bytes((head[0] | 0x08,)) + head[1:]
            if packet_id is None:
                packet_id = self._packet_id()
            if session.sent(key, packet_id, qos):
                self._hold_for_record()
        else:
            packet_id = self._packet_id()
        in_flight[packet_id] = InFlight(qos, acks)
        if len(tail) <= _JOIN_MAX:  # one piece to write (a large payload is not copied)
            self.cnx.send_bytes(b"".join((head, packet_id.to_bytes(2, "big"), tail)))
        else:
            self.cnx.send_bytes(head + packet_id.to_bytes(2, "big"))
            self.cnx.send_bytes(tail)

    def _hold_for_record(self) -> None:
        """A durable session's QoS 2 PUBLISH is about to go under an identifier its record does not
        hold: it, and what the connection sends after it, waits until the record holds it; the
        record is written once for those of this loop pass, at its end."""
        if self._recording is not None:
            return
        loop = asyncio.get_running_loop()
        self._recording = loop.create_future()
        self.cnx.hold_output(self._recording)
        loop_pass.current().defer(loop_pass.FLUSH, self._write_record)

    def _write_record(self) -> None:
        recording, self._recording = self._recording, None
        assert recording is not None
        session = self.cnx.session
        if session is None or session.ended:
            recording.set_result(None)
            return
        self.cnx.server.sessions.store.save(session).add_done_callback(
            lambda saving: self._recorded(recording, saving)
        )

    def _recorded(self, recording: asyncio.Future[None], saving: asyncio.Future[None]) -> None:
        if not saving.cancelled() and (exc := saving.exception()) is not None:
            log.error("%s: QoS 2 packet identifiers are not stored: %s", self.cnx.remote, exc)
        if not recording.done():
            recording.set_result(None)

    def _packet_id(self) -> int:
        session = self.cnx.session
        taken = session.unacked_ids if session is not None else {}
        released = session.released if session is not None else set()
        in_flight = self.in_flight
        candidate = self._next_id % 65535 + 1  # the next one is mostly free: no loop for it
        if candidate not in in_flight and candidate not in taken and candidate not in released:
            self._next_id = candidate
            return candidate
        for _ in range(65535):
            self._next_id = self._next_id % 65535 + 1
            candidate = self._next_id
            if candidate not in self.in_flight and candidate not in taken and candidate not in released:
                return candidate
        raise RuntimeError("no packet identifier free")  # in flight is bounded far below 65535

    def received(self, packet: PubRec) -> None:
        """PUBREC of a QoS 2 message: it is the client's now (its entry is acknowledged); PUBREL.
        A refusal (reason 0x80 or above) ends the flow there."""
        flight = self.in_flight.get(packet.packet_id)
        session = self.cnx.session
        if flight is None or flight.qos != 2:
            self.cnx.send(PubRel(packet.packet_id, 0x92 if self.cnx.version == MQTT_5 else 0))
            return
        if session is not None:
            key = session.unacked_ids.get(packet.packet_id)
            session.acknowledged(packet.packet_id)
            entry = flight.entry
            watch = None if entry is None or not session.durable else entry.consumer.watch(entry.position)
            if watch is not None and key is not None and packet.reason_code < 0x80:
                # Never sent again as new, after a restart either, while its acknowledgement
                # may not be on disk (session.py); in the record before the PUBREL (below).
                session.delivered(key, watch)
                if entry is not None and entry.consumer.group is not None:  # nor to another member
                    self.cnx.server.sessions.delivered_in_group(
                        key[0], entry.consumer.group, session.client_id
                    )
        if not flight.released:
            self._entry_done(flight)
        if packet.reason_code >= 0x80:
            del self.in_flight[packet.packet_id]
            if session is not None:
                self.cnx.server.sessions.store.update(session)  # its identifier is free again
            self._send_waiting()
            return
        flight.released = True
        packet_id = packet.packet_id
        if session is not None:
            session.released.add(packet_id)
            session.prune_delivered()
            if session.durable and not session.ended:
                # In the session's record before the PUBREL: after a restart, even a kill -9,
                # the PUBREL goes again and the identifier stays the client's until PUBCOMP.
                saving = self.cnx.server.sessions.store.save(session)
                saving.add_done_callback(lambda done: self._release(packet_id, flight, done))
                return
        self.cnx.send(PubRel(packet_id))

    def _release(self, packet_id: int, flight: InFlight, saving: asyncio.Future[None]) -> None:
        if not saving.cancelled() and (exc := saving.exception()) is not None:
            log.error("%s: the session record of a PUBREL is not stored: %s", self.cnx.remote, exc)
        if not self.cnx.closed and self.in_flight.get(packet_id) is flight:
            self.cnx.send(PubRel(packet_id))

    def acknowledged(self, packet_id: int, kind: PacketType, reason: int) -> None:
        """PUBACK (QoS 1) or PUBCOMP (QoS 2): the flow is over; an unknown packet identifier, or
        the wrong acknowledgement, is ignored (a late one after a reconnect)."""
        flight = self.in_flight.get(packet_id)
        if flight is None:
            return
        session = self.cnx.session
        if kind is PacketType.PUBACK:
            if flight.qos != 1:
                return
            if session is not None:
                session.acknowledged(packet_id)
            self._entry_done(flight)
        elif not flight.released:  # PUBCOMP before PUBREC
            return
        elif session is not None:
            session.released.discard(packet_id)
            session.prune_delivered()
            self.cnx.server.sessions.store.update(session)
        del self.in_flight[packet_id]
        if self.waiting:
            self._send_waiting()

    def receipts_answered(self, receipts: Sequence[AckedOnDisk], confirmed: bool) -> None:
        """A topic's owner answered (``remote.py``): the acknowledgements of delivered QoS 2
        messages reached its disk (their keys leave the session's record), or the question was
        lost (their keys are awaited nowhere until it is asked again)."""
        session = self.cnx.session
        if session is None:
            return
        if not confirmed:
            session.unwatch(receipts)
        elif session.prune_delivered():
            self.cnx.server.sessions.store.update(session)

    def _entry_done(self, flight: InFlight) -> None:
        acks, flight.entry = flight.entry, None
        if acks is not None:
            acks.left -= 1
            if acks.left == 0:
                done(acks.consumer, acks.position, acks.messages)

    def forget(self, consumer: MqttConsumer) -> None:
        """``consumer`` is gone: what it had in flight is no longer its to acknowledge (the
        packet identifiers stay taken until the client answers), and its permits are the other
        consumers' again."""
        self.given -= consumer.granted
        consumer.granted = 0
        self._refill(at_least_one=False)
        for flight in self.in_flight.values():
            if flight.entry is not None and flight.entry.consumer is consumer:
                flight.entry = None


#: A PUBLISH whose payload and properties are at most this many bytes is written as one piece.
_JOIN_MAX = 1024


def _size(packet: Publish, version: int) -> int:
    """The bytes ``packet`` takes on the wire (a QoS 1 or 2 one with its packet identifier, which
    is given only when it is sent)."""
    if packet.qos and packet.packet_id is None:
        packet = dataclasses.replace(packet, packet_id=1)
    return len(encode(packet, version))


def cursor_of(consumer: Consumer) -> ManagedCursor | None:
    """The durable cursor ``consumer``'s subscription is served from; None where there is none
    here (a topic another worker owns, a non-persistent one)."""
    cursor = getattr(consumer.subscription, "cursor", None)
    return cursor if isinstance(cursor, ManagedCursor) and cursor.durable else None


def done(consumer: MqttConsumer, position: Position, messages: int) -> None:
    """Acknowledge the entry on the subscription and give its permits back to the connection."""
    if consumer.closed:
        return
    acknowledge(consumer, position)
    consumer.cnx.outbound.returned(consumer, messages)  # type: ignore[attr-defined]  # an MqttConnection


def acknowledge(consumer: MqttConsumer, position: Position) -> None:
    """Acknowledge the entry at ``position`` (a whole chunked message: all its chunks) on the
    consumer's subscription; without a protobuf command where its dispatcher takes one id so."""
    if consumer.closed:
        return
    outbound: Outbound = consumer.cnx.outbound  # type: ignore[attr-defined]  # an MqttConnection
    subscription = consumer.subscription
    chunks = outbound.positions(consumer, position)
    if chunks is None:
        # On a broadcast subscription, an entry that is the only one the consumer was sent and
        # has not acknowledged is acknowledged with all before it: cumulatively, the cheaper way.
        pending = consumer.pending_acks
        cumulative = (
            getattr(subscription, "kind", None) is SubscriptionType.Broadcast
            and len(pending) == 1
            and position in pending
        )
        if subscription.acknowledge_one(
            consumer, cumulative, to_u64(position.ledger_id), to_u64(position.entry_id)
        ):
            return
    message_ids = [
        wire.MessageIdData(ledger_id=to_u64(one.ledger_id), entry_id=to_u64(one.entry_id))
        for one in (chunks or [position])
    ]
    ack = wire.CommandAck(
        consumer_id=consumer.consumer_id, ack_type=wire.CommandAck.Individual, message_id=message_ids
    )
    subscription.acknowledge(ack, consumer)


def _drop_chunk(consumer: Consumer, position: Position) -> None:
    """A chunk that will never make a message: acknowledged, its permit given back."""
    if isinstance(consumer, MqttConsumer):
        done(consumer, position, 1)
