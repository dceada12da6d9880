"""SUBSCRIBE and UNSUBSCRIBE: a client's Topic Filters as consumers on the topics they match.

A filter without wildcards names one topic (made if missing, as Pulsar's MQTT handler does); one
with ``+`` or ``#`` matches the topics of its namespace whose decoded names it matches, listed off
the loop at SUBSCRIBE, and every topic loaded later (created, or opened again) that it matches
(``MqttServer.topic_loaded``): subscribed there at the latest position, which for a new topic is
its first message. Each topic gets one consumer per client, at the highest QoS of its matching
filters (3.3.4: a server may send one message per matching subscription or one in all).

The subscription on a topic is named after the client id and is non-durable: messages stored
while the client is away are not kept for it yet (persistent sessions are a next step).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, NamedTuple

from magnetar.broker.consumer import Consumer
from magnetar.broker.mqtt import access
from magnetar.broker.mqtt.outbound import PERMITS, MqttConsumer
from magnetar.broker.mqtt.session import FilterOptions, MqttSession
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol import wire
from magnetar.protocol.mqtt import MQTT_5, MqttError, ReasonCode, SubAck, Subscribe, UnsubAck, Unsubscribe
from magnetar.protocol.mqtt.codes import SUBACK_FAILURE_3_1_1
from magnetar.protocol.mqtt.pulsar_names import (
    NON_PERSISTENT,
    decode_name,
    mqtt_topic,
    namespace_of_filter,
    pulsar_topic,
)
from magnetar.protocol.mqtt.topics import has_wildcard, matches, shared_filter
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection
    from magnetar.broker.topic_api import Subscription

log = logging.getLogger(__name__)
R = ReasonCode


def handle_subscribe(cnx: MqttConnection, packet: Subscribe) -> None:
    session = cnx.session
    assert session is not None
    v5 = cnx.version == MQTT_5
    if v5 and packet.properties.subscription_identifiers:
        raise MqttError(
            R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED, "Subscription Identifiers are not supported"
        )
    failure = R.UNSPECIFIED_ERROR if v5 else SUBACK_FAILURE_3_1_1
    codes: list[int] = []
    wanted: list[str] = []
    for sub in packet.subscriptions:
        topic_filter = sub.topic_filter
        if shared_filter(topic_filter) is not None:
            codes.append(R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED if v5 else SUBACK_FAILURE_3_1_1)
            continue
        if not access.may_subscribe(cnx, topic_filter):
            codes.append(R.NOT_AUTHORIZED if v5 else SUBACK_FAILURE_3_1_1)
            continue
        domain, namespace, _ = _split(cnx, topic_filter)
        if domain == NON_PERSISTENT or not _namespace_exists(cnx, namespace):
            codes.append(failure)
            continue
        session.filters[topic_filter] = FilterOptions(sub.qos, sub.no_local)
        codes.append(sub.qos)
        wanted.append(topic_filter)
    attaching = asyncio.ensure_future(attach_filters(cnx, wanted))

    def answer(done: asyncio.Future[set[str]]) -> None:
        failed = done.result() if not done.cancelled() and done.exception() is None else set(wanted)
        answered = [
            failure if sub.topic_filter in failed and code < 0x80 else code
            for sub, code in zip(packet.subscriptions, codes, strict=True)
        ]
        cnx.send(SubAck(packet.packet_id, tuple(answered)))

    cnx.wait_for(attaching, answer)


def handle_unsubscribe(cnx: MqttConnection, packet: Unsubscribe) -> None:
    session = cnx.session
    assert session is not None
    codes = []
    for topic_filter in packet.topic_filters:
        existed = session.filters.pop(topic_filter, None) is not None
        codes.append(R.SUCCESS if existed else R.NO_SUBSCRIPTION_EXISTED)
    for consumer in list(cnx.consumers_by_topic.values()):
        options = options_for(session, consumer.subscription.topic.name, default_namespace(cnx))
        if options is None:
            forget_consumer(cnx, consumer)
        else:
            consumer.qos, consumer.no_local = options.qos, options.no_local
    cnx.send(UnsubAck(packet.packet_id, tuple(codes) if cnx.version == MQTT_5 else ()))


def resume(cnx: MqttConnection) -> None:
    """A session taken up again: consumers for its filters once more, before the packets after
    its CONNECT are handled."""
    session = cnx.session
    if session is not None and session.filters:
        cnx.wait_for(asyncio.ensure_future(attach_filters(cnx, list(session.filters))), lambda done: None)


async def attach_filters(cnx: MqttConnection, filters: list[str]) -> set[str]:
    """Consumers on the topics ``filters`` match now; the filters that failed (then forgotten)."""
    session = cnx.session
    assert session is not None
    failed = set()
    for topic_filter in filters:
        try:
            for name in await _topics_of(cnx, topic_filter):
                await _attach(cnx, name)
        except Exception as exc:
            log.warning("%s: cannot subscribe to %r: %s", cnx.remote, topic_filter, exc)
            failed.add(topic_filter)
            session.filters.pop(topic_filter, None)
    return failed


class Options(NamedTuple):
    qos: int
    no_local: bool
    #: The matching filter named the namespace (``persistent://t/ns/...``): so do the messages.
    prefixed: bool


def options_for(session: MqttSession, name: TopicName, default_namespace: str) -> Options | None:
    """What the session's filters that match ``name`` ask for; None if none matches. A filter
    that names no namespace filters ``default_namespace``'s persistent topics."""
    try:
        local = decode_name(name.local_name)
    except UnicodeDecodeError:
        return None
    found: Options | None = None
    for topic_filter, options in session.filters.items():
        domain, namespace, local_filter = namespace_of_filter(topic_filter, "", "")
        if domain:
            if domain != f"{name.domain}://" or namespace != name.namespace_name:
                continue
        elif name.domain != "persistent" or name.namespace_name != default_namespace:
            continue
        if matches(local_filter, local):
            qos = max(options.qos, found.qos) if found else options.qos
            no_local = options.no_local or (found.no_local if found else False)
            found = Options(qos, no_local, bool(domain) if found is None else found.prefixed)
    return found


def default_namespace(cnx: MqttConnection) -> str:
    return f"{cnx.config.mqtt_default_tenant}/{cnx.config.mqtt_default_namespace}"


def _split(cnx: MqttConnection, topic_filter: str) -> tuple[str, str, str]:
    config = cnx.config
    return namespace_of_filter(topic_filter, config.mqtt_default_tenant, config.mqtt_default_namespace)


def _namespace_exists(cnx: MqttConnection, namespace: str) -> bool:
    try:
        cnx.service.namespaces.policies(namespace)
    except Exception:
        return False
    return True


async def _topics_of(cnx: MqttConnection, topic_filter: str) -> list[TopicName]:
    config = cnx.config
    if not has_wildcard(topic_filter):
        return [pulsar_topic(topic_filter, config.mqtt_default_tenant, config.mqtt_default_namespace)]
    _, namespace, local_filter = _split(cnx, topic_filter)
    listed: list[str] = await cnx.service.listing_topics(namespace, 0, lambda names: names)
    out = []
    for full in listed:
        try:
            name = TopicName.parse(full)
            if matches(local_filter, decode_name(name.local_name)):
                out.append(name)
        except (InvalidTopicName, UnicodeDecodeError):
            continue
    return out


async def _attach(cnx: MqttConnection, name: TopicName) -> None:
    opening = cnx.service.preparing(name)
    if opening is not None:
        await opening
    if cnx.closed:
        return
    topic = cnx.service.get_topic(name, create=True)
    if isinstance(topic, PersistentTopic):
        attach_loaded(cnx, topic)


def attach_loaded(cnx: MqttConnection, topic: PersistentTopic) -> None:
    """The client's consumer on the loaded ``topic``, made if its filters match and it has none."""
    session = cnx.session
    if session is None or cnx.closed or not access.may_consume(cnx, topic.name):
        return
    options = options_for(session, topic.name, default_namespace(cnx))
    key = str(topic.name)
    existing = cnx.consumers_by_topic.get(key)
    if options is None:
        return
    if existing is not None and not existing.closed:
        existing.qos, existing.no_local = options.qos, options.no_local
        return
    consumer_id = cnx.next_id()
    cmd = wire.CommandSubscribe(
        topic=key,
        subscription=session.client_id,
        sub_type=wire.CommandSubscribe.Exclusive,
        consumer_id=consumer_id,
        request_id=0,
        consumer_name=session.client_id,
        durable=False,
        initial_position=wire.CommandSubscribe.Latest,
    )
    shown = mqtt_topic(topic.name, options.prefixed)

    def make(subscription: Subscription[Consumer]) -> Consumer:
        return MqttConsumer(
            cnx, subscription, consumer_id, session.client_id, shown, options.qos, options.no_local
        )

    consumer = topic.subscribe(make, cmd)
    assert isinstance(consumer, MqttConsumer)
    cnx.consumers_by_topic[key] = consumer
    cnx.consumers[consumer_id] = consumer
    consumer.subscription.flow(consumer, PERMITS)


def forget_consumer(cnx: MqttConnection, consumer: Consumer) -> None:
    """Take ``consumer`` off its subscription and out of the connection's books."""
    key = str(consumer.subscription.topic.name)
    if cnx.consumers_by_topic.get(key) is consumer:
        del cnx.consumers_by_topic[key]
    cnx.consumers.pop(consumer.consumer_id, None)
    if isinstance(consumer, MqttConsumer):
        cnx.outbound.forget(consumer)
    if not consumer.closed:
        consumer.subscription.remove_consumer(consumer)


def drop_all(cnx: MqttConnection) -> None:
    for consumer in list(cnx.consumers.values()):
        forget_consumer(cnx, consumer)
