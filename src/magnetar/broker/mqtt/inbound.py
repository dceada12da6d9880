"""PUBLISH from a client into its Pulsar topic, and the QoS 2 release (PUBREL).

The topic is the MQTT Topic Name mapped as Pulsar's MQTT handler maps it (``pulsar_names``). The
message is stored as a Pulsar producer's would be (``messages.pulsar_properties``), under the
client's producer on that topic, with the other messages of the connection's pass to that topic
in one batch entry (``publish_batches.py``), and acknowledged once it is on disk: PUBACK (QoS 1)
and PUBREC (QoS 2) leave only from the store's durable callback, as a Pulsar SEND_RECEIPT does,
and in the order the PUBLISHes came (4.6; ``MqttConnection.send_answer``: one stored sooner
waits for those before).
QoS 0 is stored the same way, with nothing to answer. A message over ``max_message_size``
(metadata and payload, as Pulsar counts) is stored in chunks (``large_messages.py``), answered
once all are durable.

QoS 2 is exactly once through the topic's deduplication: the client's producer is deduplicated
whatever the namespace says, each message gets a sequence id above any the topic holds from it,
and the packet identifier -> sequence id record (``qos2_store.py``) is committed before the message
is stored, so a copy sent again, before or after a restart, carries the same sequence id and is
answered as a duplicate once the first is stored.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.broker.errors import REQUEST_ERRORS, BrokerError
from magnetar.broker.mqtt import access, remote, resends
from magnetar.broker.mqtt.messages import pulsar_properties, to_pulsar
from magnetar.broker.mqtt.publish_batches import Pending
from magnetar.broker.mqtt.qos2_store import Received
from magnetar.broker.mqtt.retained import Retained, kept_properties
from magnetar.broker.mqtt.session import Incoming
from magnetar.broker.producer import Producer
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol import wire
from magnetar.protocol.mqtt import (
    MQTT_5,
    MqttError,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
)
from magnetar.protocol.mqtt.codes import PacketType
from magnetar.protocol.mqtt.properties import NONE
from magnetar.protocol.mqtt.pulsar_names import pulsar_topic
from magnetar.protocol.topic_name import InvalidTopicName, TopicName
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection

log = logging.getLogger(__name__)
R = ReasonCode
#: Topic Aliases a client may set (5.0: Topic Alias Maximum in CONNACK).
TOPIC_ALIAS_MAXIMUM = 100
#: A PUBACK's fixed header for success: the packet identifier follows, and nothing else (a 5.0
#: PUBACK leaves out Reason Code 0 and empty properties, 3.4.2.1), so every client reads it.
_PUBACK = bytes((PacketType.PUBACK << 4, 2))


def handle_publish(cnx: MqttConnection, packet: Publish) -> None:
    session = cnx.session
    assert session is not None
    v5 = cnx.version == MQTT_5
    if packet.qos:
        assert packet.packet_id is not None
        cnx.received_unanswered(packet.qos, packet.packet_id)
    name = packet.topic if packet.properties.topic_alias is None else _topic_name(cnx, packet)
    if v5 and packet.properties.subscription_identifiers:
        raise MqttError(R.PROTOCOL_ERROR, "a PUBLISH from a client with a Subscription Identifier")
    if v5 and packet.properties.payload_format_indicator == 1 and not _utf8(packet.payload):
        _refused(
            cnx,
            packet,
            R.PAYLOAD_FORMAT_INVALID,
            "the payload is not UTF-8, as its Payload Format Indicator says",
        )
        return
    if packet.qos == 2:
        assert packet.packet_id is not None
        incoming = session.incoming.get(packet.packet_id)
        if incoming is not None and incoming.stored:
            cnx.send_answer(2, packet.packet_id, PubRec(packet.packet_id))  # sent again: stored already
            return
    else:
        target = cnx.publish_targets.get(name)
        if target is not None and not target.producer.closed:  # the topic's open, its producer there
            unauthorized = access.publish_refused(cnx, target.name)
            if unauthorized is not None:
                _refused(cnx, packet, R.NOT_AUTHORIZED, unauthorized)
                return
            topic, producer = target.topic, target.producer
            _store(cnx, packet, topic, producer, session.next_sequence(target.key, _highest(topic, producer)))
            return
    try:
        topic_name = _mapped(name, cnx.config.mqtt_default_tenant, cnx.config.mqtt_default_namespace)
        if not topic_name.persistent:
            raise InvalidTopicName("MQTT publishes to persistent topics only for now")
    except InvalidTopicName as exc:
        _refused(cnx, packet, R.TOPIC_NAME_INVALID, str(exc))
        return
    unauthorized = access.publish_refused(cnx, topic_name)
    if unauthorized is not None:  # before anything is made for it (the topic included)
        _refused(cnx, packet, R.NOT_AUTHORIZED, unauthorized)
        return
    _route(cnx, packet, name, topic_name, 0)


@dataclass(slots=True)
class Target:
    """Where a client's PUBLISHes to one Topic Name go, while its producer there is open: the next
    ones skip the mapping, the topic's lookup and the producer's."""

    name: TopicName
    #: ``str(name)``.
    key: str
    topic: PersistentTopic
    producer: Producer


#: Topic Names a connection keeps a ``Target`` for; past this many they are forgotten together.
MAX_TARGETS = 1000


@functools.lru_cache(maxsize=4096)
def _mapped(name: str, tenant: str, namespace: str) -> TopicName:
    """``pulsar_topic``, once per name: a device publishes to the same few topics again and again
    (an InvalidTopicName is not cached, and raised again)."""
    return pulsar_topic(name, tenant, namespace)


def _utf8(payload: bytes) -> bool:
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _topic_name(cnx: MqttConnection, packet: Publish) -> str:
    """The Topic Name, with a 5.0 Topic Alias applied (3.3.2.3.4)."""
    alias = packet.properties.topic_alias
    if alias is None:
        return packet.topic
    if alias > TOPIC_ALIAS_MAXIMUM:
        raise MqttError(R.TOPIC_ALIAS_INVALID, f"Topic Alias {alias} over the maximum {TOPIC_ALIAS_MAXIMUM}")
    if packet.topic:
        cnx.topic_aliases[alias] = packet.topic
        return packet.topic
    known = cnx.topic_aliases.get(alias)
    if known is None:
        raise MqttError(R.PROTOCOL_ERROR, f"Topic Alias {alias} was never set")
    return known


def _topic_and_producer(
    cnx: MqttConnection, packet: Publish, name: TopicName, opened: asyncio.Future[Any] | None
) -> tuple[PersistentTopic, Producer] | None:
    """The topic (opened off the loop first where ``opened``) and the connection's producer on
    it; None when ``packet`` was refused for it."""
    try:
        if opened is not None and not opened.cancelled() and (failure := opened.exception()) is not None:
            raise failure
        topic = cnx.service.get_topic(name, create=True)
        if not isinstance(topic, PersistentTopic):
            raise BrokerError(f"{name} is not a persistent topic", wire.NotAllowedError)
        return topic, _producer(cnx, topic)
    except REQUEST_ERRORS as exc:
        _refused(cnx, packet, _reason_of(exc), str(exc))
    except Exception as exc:
        log.exception("%s: cannot publish to %s", cnx.remote, name)
        _refused(cnx, packet, R.UNSPECIFIED_ERROR, str(exc))
    return None


def _publish_to(
    cnx: MqttConnection,
    packet: Publish,
    mqtt_name: str,
    name: TopicName,
    opened: asyncio.Future[Any] | None,
    tries: int = 0,
) -> None:
    """A PUBLISH to a topic this worker serves (``opened``: its opening off the loop, or None);
    where the bundle left this worker meanwhile (an unload: its next owner may be another
    worker), routed again shortly, the packets behind waiting, while tries are left."""
    session = cnx.session
    assert session is not None
    if resends.not_served(opened) and tries < resends.TRIES and not cnx.closed:
        _route_later(cnx, packet, mqtt_name, name, tries)
        return
    found = _topic_and_producer(cnx, packet, name, opened)
    if found is None:
        return
    topic, producer = found
    key = str(name)
    if packet.qos != 2:
        targets = cnx.publish_targets
        if len(targets) >= MAX_TARGETS:
            targets.clear()
        targets[mqtt_name] = Target(name, key, topic, producer)
    _sequenced(
        cnx,
        packet,
        name,
        _highest(topic, producer),
        lambda sequence: _store(cnx, packet, topic, producer, sequence),
    )


def _publish_remote(
    cnx: MqttConnection,
    packet: Publish,
    mqtt_name: str,
    name: TopicName,
    made: asyncio.Future[remote.RemoteProducer],
    tries: int = 0,
) -> None:
    """A PUBLISH to a topic another worker owns, once the connection's producer there is made;
    where it could not be (the bundle between owners), routed again shortly, the packets behind
    waiting, while tries are left."""
    if made.cancelled() or (failure := made.exception()) is not None:
        if tries < resends.TRIES and not cnx.closed:
            _route_later(cnx, packet, mqtt_name, name, tries)
            return
        reason = "cancelled" if made.cancelled() else str(failure)
        code = R.UNSPECIFIED_ERROR if made.cancelled() else _reason_of(failure)  # type: ignore[arg-type]
        _refused(cnx, packet, code, f"the topic's owner cannot be reached: {reason}")
        return
    producer = made.result()
    _sequenced(
        cnx,
        packet,
        name,
        producer.last_sequence_id,
        lambda sequence: _store_remote(cnx, packet, name, producer, sequence),
    )


def _route_later(cnx: MqttConnection, packet: Publish, mqtt_name: str, name: TopicName, tries: int) -> None:
    """Route ``packet`` again shortly (its bundle between owners), the packets behind waiting."""
    pause: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_later(resends.DELAY_S * (tries + 1), _end_pause, pause)
    cnx.wait_for(pause, lambda _: _route(cnx, packet, mqtt_name, name, tries + 1))


def _end_pause(pause: asyncio.Future[None]) -> None:
    if not pause.done():
        pause.set_result(None)


def _route(cnx: MqttConnection, packet: Publish, mqtt_name: str, name: TopicName, tries: int) -> None:
    """``packet`` to wherever ``name`` is served now: another worker (through a session to it), or
    this one; the packets behind wait. Sends to ``name`` that its owner dropped go first
    (``resends.py``): behind them, ``packet`` keeps its place, and its sequence id stays above
    theirs at the topic."""
    held = resends.released(cnx, name)
    if held is not None:
        cnx.wait_for(held, lambda _: _route(cnx, packet, mqtt_name, name, tries))
        return
    owner = remote.owner_elsewhere(cnx.service, name)
    if owner is not None:
        cnx.wait_for(
            cnx.links.producer(name, owner),
            lambda done: _publish_remote(cnx, packet, mqtt_name, name, done, tries),
        )
        return
    unreceipted = resends.unreceipted(cnx, name)
    if unreceipted is not None:  # the bundle came here: the sends to its old owner are answered first
        cnx.wait_for(unreceipted, lambda _: _route(cnx, packet, mqtt_name, name, tries))
        return
    opening = cnx.service.preparing(name)
    if opening is not None:  # opened off the loop first
        cnx.wait_for(opening, lambda done: _publish_to(cnx, packet, mqtt_name, name, done, tries))
        return
    _publish_to(cnx, packet, mqtt_name, name, None, tries)


def _sequenced(
    cnx: MqttConnection, packet: Publish, name: TopicName, highest: int, store: Callable[[int], None]
) -> None:
    """Number the message (``highest``: the highest sequence id the topic holds from the client)
    and ``store`` it; for QoS 2, once its record is committed."""
    session = cnx.session
    assert session is not None
    if packet.qos != 2:
        store(session.next_sequence(str(name), highest))
        return
    assert packet.packet_id is not None
    packet_id = packet.packet_id
    incoming = session.incoming.get(packet_id)
    if incoming is not None and (packet.dup or incoming.received.topic == str(name)):
        # Sent again while the first copy is being stored, or after a restart (its record).
        store(incoming.received.sequence_id)
        return
    received = Received(str(name), session.next_sequence(str(name), highest))
    session.incoming[packet_id] = Incoming(received)
    recording = cnx.server.qos2.put(session.client_id, packet_id, received)

    def recorded(done: asyncio.Future[Any]) -> None:
        if done.cancelled() or done.exception() is not None:
            log.error("%s: the QoS 2 record could not be committed: %s", cnx.remote, done.exception())
            session.incoming.pop(packet_id, None)
            _refused(cnx, packet, R.UNSPECIFIED_ERROR, "the message could not be recorded")
            return
        store(received.sequence_id)

    cnx.wait_for(recording, recorded)


def _highest(topic: PersistentTopic, producer: Producer) -> int:
    return topic.deduplication.highest_sequence_id(producer.name)


def _producer(cnx: MqttConnection, topic: PersistentTopic) -> Producer:
    """The connection's producer on ``topic``, made on its first PUBLISH there."""
    key = str(topic.name)
    producer = cnx.producers_by_topic.get(key)
    if producer is not None and not producer.closed:
        return producer
    session = cnx.session
    assert session is not None
    producer = Producer(cnx, topic, cnx.next_id(), session.producer_name, user_provided_name=True)
    producer.deduplicated = True
    topic.add_producer(producer)
    cnx.producers_by_topic[key] = producer
    cnx.producers[producer.producer_id] = producer
    return producer


def _store(
    cnx: MqttConnection,
    packet: Publish,
    topic: PersistentTopic,
    producer: Producer,
    sequence: int,
    alone: bool = False,
) -> None:
    """Store the message with the others of this pass to its topic (``publish_batches.py``; in an
    entry of its own where ``alone``, as at QoS 2) and, once it is stored, with RETAIN, its
    topic's retained message; answer PUBACK / PUBREC once both are durable."""
    now = time.time()
    size = len(packet.payload)
    producer.traffic.messages_in += 1
    producer.traffic.bytes_in += size
    topic.traffic.messages_in += 1
    topic.traffic.bytes_in += size
    cnx.store_started()
    if packet.properties is NONE:  # most PUBLISHes: the same few properties, made once
        properties: Sequence[tuple[str, str]] = _PLAIN_PROPERTIES[packet.retain][packet.qos]
    else:
        properties = tuple(pulsar_properties(packet.properties, now, packet.retain, packet.qos))
    stored = _Answer(cnx, packet, topic.name, now)
    alone = alone or packet.qos == 2
    pending = Pending(packet.payload, properties, sequence, int(now * 1000), stored, alone)
    cnx.publishes.add(topic, producer, pending)


#: The Pulsar properties of a PUBLISH without properties, by RETAIN and QoS.
_PLAIN_PROPERTIES = tuple(
    tuple(tuple(pulsar_properties(NONE, 0, bool(retain), qos)) for qos in range(3)) for retain in range(2)
)


def _store_remote(
    cnx: MqttConnection, packet: Publish, name: TopicName, producer: remote.RemoteProducer, sequence: int
) -> None:
    """``_store`` on a topic another worker owns: SEND to its owner, answered by its receipt. A
    send lost because the owner closed the producer (the topic's bundle moved, the owner
    restarted) goes again with the same sequence id, held with the other sends to the topic that
    were lost, before any later PUBLISH there (``resends.py``): through a new producer at the
    topic's owner then (deduplication answers a copy that was stored after all), or here if the
    bundle moved to this worker."""
    now = time.time()
    metadata, data = to_pulsar(
        packet.payload, packet.properties, producer.name, sequence, int(now * 1000), packet.retain, packet.qos
    )
    cnx.store_started()
    stored = _Answer(cnx, packet, name, now)
    max_size = cnx.config.max_message_size
    drops = 0

    def send(to: remote.RemoteProducer) -> None:
        try:
            if metadata.ByteSize() + len(packet.payload) > max_size:
                to.send_chunked(metadata, packet.payload, max_size, lambda p, e: sent(to, p, e))
            else:
                to.send(sequence, data, lambda p, e: sent(to, p, e))
        except Exception as exc:
            log.exception("%s: sending a message to its owner failed", name)
            stored(None, exc)

    def sent(to: remote.RemoteProducer, position: Position | None, exc: Exception | None) -> None:
        nonlocal drops
        if exc is not None and to.closed and drops < resends.TRIES and not cnx.closed:
            drops += 1
            resends.hold(cnx, name, dropped)
            return
        stored(position, exc)

    def here(opened: asyncio.Future[Any] | None) -> None:
        cnx.store_done()  # stored again from the start, and answered from there
        _store_here(cnx, packet, name, sequence, opened)

    dropped = resends.Dropped(send, here, lambda failure: stored(None, failure))
    send(producer)


def _store_here(
    cnx: MqttConnection, packet: Publish, name: TopicName, sequence: int, opened: asyncio.Future[Any] | None
) -> None:
    """A message first sent to another worker, stored here (``opened``: the topic's opening off
    the loop, or None): the topic's bundle moved to this worker while it was on its way. In an
    entry of its own: the old owner may have stored it after all, and deduplication judges a
    batch by its highest sequence id (a batch of it and the next ones would store it twice)."""
    if cnx.closed:
        return
    found = _topic_and_producer(cnx, packet, name, opened)
    if found is not None:
        _store(cnx, packet, *found, sequence, alone=True)


class _Answer:
    """What is done once a PUBLISH is stored, or could not be: with RETAIN, its topic's retained
    message set (durably) first; then the PUBACK or PUBREC, or the refusal. An object rather
    than a closure: a closure that names itself (to run again once the retained message is
    stored) is a reference cycle, which kept every message's packet for the garbage collector
    to find."""

    __slots__ = ("cnx", "now", "packet", "retaining", "topic")

    def __init__(self, cnx: MqttConnection, packet: Publish, topic: TopicName, now: float) -> None:
        self.cnx = cnx
        self.packet = packet
        self.topic = topic
        self.now = now
        self.retaining: asyncio.Future[None] | None = None

    def __call__(self, position: Position | None, exc: Exception | None) -> None:
        cnx, packet = self.cnx, self.packet
        retaining = self.retaining
        if exc is None and packet.retain and retaining is None:
            # Only a message stored replaces the retained one (a refused one leaves it as it was);
            # an empty payload deletes it (3.3.1.3). Acknowledged once both are durable.
            topic = str(self.topic)
            retaining = self.retaining = cnx.server.retained.set(topic, retained_of(topic, packet, self.now))
        if retaining is not None and not retaining.done():
            retaining.add_done_callback(functools.partial(_answer_later, self, position, exc))
            return
        cnx.store_done()
        if cnx.closed:
            return
        failure: BaseException | None = exc
        if failure is None and retaining is not None:
            failure = asyncio.CancelledError() if retaining.cancelled() else retaining.exception()
        if failure is not None:
            _refused(cnx, packet, R.UNSPECIFIED_ERROR, f"the message could not be stored: {failure}")
            return
        qos = packet.qos
        if qos == 1:
            packet_id = packet.packet_id
            assert packet_id is not None
            cnx.acknowledge(packet_id, _PUBACK + packet_id.to_bytes(2, "big"))
        elif qos == 2:
            assert packet.packet_id is not None and cnx.session is not None
            incoming = cnx.session.incoming.get(packet.packet_id)
            if incoming is not None:
                incoming.stored = True
            cnx.send_answer(2, packet.packet_id, PubRec(packet.packet_id))


def _answer_later(
    answer: _Answer, position: Position | None, exc: Exception | None, _: asyncio.Future[None]
) -> None:
    answer(position, exc)


def retained_of(topic: str, packet: Publish, now: float) -> Retained | None:
    """What a PUBLISH with RETAIN leaves as its topic's retained message: None for an empty one."""
    if not packet.payload:
        return None
    expiry = packet.properties.message_expiry_interval
    expires_at = None if expiry is None else now + expiry
    return Retained(topic, packet.payload, packet.qos, kept_properties(packet.properties), expires_at)


def _reason_of(exc: Exception) -> ReasonCode:
    code = getattr(exc, "code", None)
    if code == wire.AuthorizationError:
        return R.NOT_AUTHORIZED
    if code == wire.InvalidTopicName:
        return R.TOPIC_NAME_INVALID
    if code in (wire.ProducerBlockedQuotaExceededError, wire.ProducerBlockedQuotaExceededException):
        return R.QUOTA_EXCEEDED
    return R.UNSPECIFIED_ERROR


def _refused(cnx: MqttConnection, packet: Publish, reason: ReasonCode, message: str) -> None:
    """A PUBLISH that cannot be stored: a 5.0 client is answered with the reason (PUBACK, PUBREC);
    QoS 0, and a 3.1.1 client (which has no negative acknowledgement), lose the connection, so
    the client knows it was not stored."""
    log.info("%s: PUBLISH to %r refused: %s", cnx.remote, packet.topic, message)
    if packet.qos and cnx.version == MQTT_5 and packet.packet_id is not None:
        ack = PubAck if packet.qos == 1 else PubRec
        code = reason if reason in (0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99) else R.UNSPECIFIED_ERROR
        cnx.answered(packet.qos, packet.packet_id)
        cnx.send_answer(
            packet.qos,
            packet.packet_id,
            ack(packet.packet_id, code, Properties(reason_string=message[:1000])),
        )
        if packet.qos == 2 and cnx.session is not None:
            cnx.session.incoming.pop(packet.packet_id, None)
        return
    cnx.close_with(reason, message)


def handle_pubrel(cnx: MqttConnection, packet: PubRel) -> None:
    """PUBREL: the QoS 2 message is released; its record goes (durably) before PUBCOMP, which lets
    the client use the packet identifier again."""
    session = cnx.session
    assert session is not None
    packet_id = packet.packet_id
    cnx.answered(2, packet_id)  # PUBCOMP follows
    incoming = session.incoming.pop(packet_id, None)
    if incoming is None:
        # Released already (a PUBREL sent again), or never received: 5.0 says which.
        cnx.send(PubComp(packet_id, R.PACKET_IDENTIFIER_NOT_FOUND if cnx.version == MQTT_5 else 0))
        return
    deleting = cnx.server.qos2.delete(session.client_id, packet_id)

    def deleted(done: asyncio.Future[Any]) -> None:
        if cnx.closed:
            return
        if done.cancelled() or done.exception() is not None:
            log.error("%s: the QoS 2 record could not be deleted: %s", cnx.remote, done.exception())
            cnx.close_with(R.UNSPECIFIED_ERROR, "the release could not be recorded")
            return
        cnx.send(PubComp(packet_id))

    deleting.add_done_callback(deleted)
