"""Last Will (3.1.2.5, 3.1.3.2): the message a CONNECT leaves, published when its connection ends
other than by a DISCONNECT that discards it.

Published when the connection is lost, closed for a missed keep alive or a protocol error, taken
over, or ended by a DISCONNECT with reason 0x04 (Disconnect with Will Message); not after a
DISCONNECT with reason 0x00 (3.1.1: any DISCONNECT), nor when the broker itself stops. A 5.0 Will
Delay Interval holds it back: it goes when the delay has passed or its session ends, whichever
comes first, and not at all if the client resumes the session before (3.1.3.2.2). It is stored
as the client's PUBLISH would be: in the topic its Will Topic maps to, under the client's
producer name and deduplication's numbering, with its Will Properties; with Will Retain it is
also the topic's retained message, once it is stored. Its producer is admitted as a PUBLISH's
is (``topic.add_producer``: access mode, backlog quota ...). With authorization on, a will
goes only where the client's role may produce (access.py), as its PUBLISH would.

A will held back is in its session's record (session_store.py: a will is held back only for a
session that outlives its connection, and such a session has a record), written before the
will's hold is logged, and taken out once the will is stored or cancelled: a broker restarted
publishes it when it is due, or at once if that has passed, or when the session ends first
(``Sessions.restore``), as the client's role of then. A broker that dies after storing it and
before its record is written again publishes it once more after the restart (at least once).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, cast

from magnetar.broker.errors import REQUEST_ERRORS
from magnetar.broker.mqtt import access, large_messages, remote
from magnetar.broker.mqtt.messages import to_pulsar
from magnetar.broker.mqtt.retained import Retained, kept_properties
from magnetar.broker.producer import Producer
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol import wire
from magnetar.protocol.mqtt import Will
from magnetar.protocol.mqtt.pulsar_names import pulsar_topic
from magnetar.protocol.topic_name import InvalidTopicName, TopicName
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection
    from magnetar.broker.mqtt.server import MqttServer
    from magnetar.broker.mqtt.session import MqttSession

log = logging.getLogger(__name__)


def connection_closed(server: MqttServer, session: MqttSession, cnx: MqttConnection, will: Will) -> None:
    """``cnx``, which left ``will``, is gone without discarding it."""
    if server.sessions.closing:
        return  # the broker is stopping: no will goes, and none is held (its record is kept)
    delay = will.properties.will_delay_interval or 0
    if session.connection is not cnx and not session.ended:
        # Another connection resumed the session already: a delayed will is not sent (3.1.3.2.2).
        if delay == 0:
            publish(server, session, will, cnx)
        return
    if delay == 0 or session.ended:
        publish(server, session, will, cnx)
        return
    cancel(session)
    hold(server, session, will, cnx, time.time() + delay)
    saving = server.sessions.store.save(session)
    client = session.client_id
    saving.add_done_callback(lambda done: _held(client, delay, done))


def hold(server: MqttServer, session: MqttSession, will: Will, cnx: object, due: float) -> None:
    """Hold ``will`` back until ``due`` (wall-clock seconds; at once if that has passed)."""
    session.pending_will = (will, cnx)
    session.will_due = due
    session.will_role = cast("MqttConnection", cnx).auth.role
    delay = max(0.0, due - time.time())
    session.will_timer = asyncio.get_running_loop().call_later(delay, fire, server, session)


def _held(client: str, delay: int, done: asyncio.Future[None]) -> None:
    if done.cancelled() or done.exception() is not None:
        log.error("MQTT client %r: its will held back is not stored: %s", client, done.exception())
    else:
        log.info("MQTT client %r: its will is held back %d s, stored with its session", client, delay)


def fire(server: MqttServer, session: MqttSession) -> None:
    """The Will Delay Interval passed, or the session ended: its pending will goes now."""
    pending = session.pending_will
    cancel(session)
    if pending is not None:
        will, cnx = pending
        publish(server, session, will, cnx)  # type: ignore[arg-type]  # a connection, held as an object


def cancel(session: MqttSession) -> None:
    """The session was resumed in time (or its will went): nothing pending (its record is
    written again by whoever cancels)."""
    session.pending_will = None
    session.will_due = session.will_role = None
    if session.will_timer is not None:
        session.will_timer.cancel()
        session.will_timer = None


def publish(server: MqttServer, session: MqttSession, will: Will, cnx: MqttConnection) -> None:
    """Store ``will`` in its topic (off the loop where the topic must be opened first)."""
    if server.sessions.closing:
        return
    task = asyncio.ensure_future(_publish(server, session, will, cnx))
    server.sessions.keep(task, "publishing its will", session.client_id)
    if session.durable:  # stored (or refused): out of the session's record
        task.add_done_callback(lambda _: server.sessions.store.update(session))


def _retained(name: TopicName, will: Will, now: float) -> Retained | None:
    """What a will with Will Retain leaves as its topic's retained message (None: an empty one)."""
    if not will.payload:
        return None
    expiry = will.properties.message_expiry_interval
    return Retained(
        str(name),
        will.payload,
        will.qos,
        kept_properties(will.properties),
        None if expiry is None else now + expiry,
    )


async def _publish(server: MqttServer, session: MqttSession, will: Will, cnx: MqttConnection) -> None:
    service = server.service
    config = service.config
    try:
        name = pulsar_topic(will.topic, config.mqtt_default_tenant, config.mqtt_default_namespace)
    except InvalidTopicName as exc:
        log.warning(
            "MQTT client %r: its Will Topic %r names no topic: %s", session.client_id, will.topic, exc
        )
        return
    if access.publish_refused(cnx, name) is not None:  # as any PUBLISH of its role (access.py)
        client = session.client_id
        log.warning("MQTT client %r: its will to %s is not published (not authorized)", client, name)
        return
    owner = remote.owner_elsewhere(service, name)
    if owner is not None:  # another worker owns it: stored there, through a session of its own
        await remote.publish_once(
            service,
            owner,
            cnx.relayed,
            name,
            session.producer_name,
            lambda sequence: to_pulsar(
                will.payload,
                will.properties,
                session.producer_name,
                sequence,
                int(time.time() * 1000),
                will.retain,
                will.qos,
            )[1],
        )
        if will.retain:  # only a will stored replaces the retained message
            await server.retained.set(str(name), _retained(name, will, time.time()))
        log.info("MQTT client %r: its will was published to %s", session.client_id, name)
        return
    opening = service.preparing(name)
    if opening is not None:
        await opening
    topic = service.get_topic(name, create=True)
    if not isinstance(topic, PersistentTopic):
        log.warning(
            "MQTT client %r: its will goes to persistent topics only, not %s", session.client_id, name
        )
        return
    producer = _producer(session, cnx, topic)
    if producer is None:
        return
    try:
        await _store(server, session, will, topic, producer)
    finally:
        if producer.cnx is cnx:  # the will's own: it leaves the topic with it
            producer.closed = True
            topic.remove_producer(producer)


def _producer(session: MqttSession, cnx: MqttConnection, topic: PersistentTopic) -> Producer | None:
    """The producer the will is stored under, admitted as a PUBLISH's would be (access mode,
    backlog quota, a terminated topic, storage refusing writes): the one of the connection now
    serving the session where it has one on the topic (same name, same numbering), else one of
    the will's own; None (logged) when the topic refuses it."""
    current = cast("MqttConnection | None", session.connection)  # only connections are set
    if current is not None and current is not cnx:
        mine = current.producers_by_topic.get(str(topic.name))
        if mine is not None and not mine.closed:
            return mine
    producer = Producer(cnx, topic, cnx.next_id(), session.producer_name, user_provided_name=True)
    producer.deduplicated = True
    try:
        admitted = topic.add_producer(producer)
    except REQUEST_ERRORS as exc:
        log.warning("MQTT client %r: its will to %s is refused: %s", session.client_id, topic.name, exc)
        return None
    if not admitted:  # waiting for exclusive access: a PUBLISH would be refused too
        topic.remove_producer(producer)
        log.warning(
            "MQTT client %r: its will to %s is refused: exclusive access", session.client_id, topic.name
        )
        return None
    return producer


async def _store(
    server: MqttServer, session: MqttSession, will: Will, topic: PersistentTopic, producer: Producer
) -> None:
    """Store the will (in chunks past max_message_size, as a PUBLISH), then, with Will Retain,
    make it the topic's retained message."""
    name = topic.name
    highest = topic.deduplication.highest_sequence_id(producer.name)
    sequence = session.next_sequence(str(name), highest)
    now = time.time()
    metadata, data = to_pulsar(
        will.payload, will.properties, producer.name, sequence, int(now * 1000), will.retain, will.qos
    )
    stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(position: Position | None, exc: Exception | None) -> None:
        if stored.done():
            return
        if exc is not None:
            stored.set_exception(exc)
        else:
            stored.set_result(None)

    send = wire.CommandSend(producer_id=producer.producer_id, sequence_id=sequence, num_messages=1)
    topic.traffic.messages_in += 1
    topic.traffic.bytes_in += len(data)
    max_size = server.service.config.max_message_size
    if metadata.ByteSize() + len(will.payload) > max_size:
        large_messages.store_chunked(topic, producer, metadata, will.payload, max_size, done)
    else:
        topic.publish(producer, send, memoryview(data), done, metadata)
    await stored  # only a will stored replaces the retained message
    if will.retain:
        await server.retained.set(str(name), _retained(name, will, now))
    log.info("MQTT client %r: its will was published to %s", session.client_id, name)
