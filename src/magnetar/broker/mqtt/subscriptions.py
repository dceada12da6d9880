"""SUBSCRIBE and UNSUBSCRIBE: a client's Topic Filters as consumers on the topics they match.

A filter without wildcards names one topic (made if missing, as Pulsar's MQTT handler does); one
with ``+`` or ``#`` matches the topics of its namespace whose decoded names it matches, listed off
the loop at SUBSCRIBE, and every topic loaded later (created, or opened again) that it matches
(``MqttServer.topic_loaded``). Each topic gets one consumer per client and Pulsar subscription,
at the highest QoS of its matching filters (3.3.4: a server may send one message per matching
subscription or one in all).

Which Pulsar subscription a client's consumer is on:

- a durable session (``session.py``): its own durable Exclusive subscription, named after the
  client id as Pulsar's MQTT handler names it, made at the latest position when the client
  subscribes (at the first message for a topic created later). Messages stored while the client
  is away wait there; a session that ends deletes it (``release_unmatched``).
- a session that ends with its connection: the topic's one non-durable broadcast subscription
  ``mqtt-subscribers`` (docs/topics-and-subscriptions.md, Broadcast), which every such client
  shares: each entry is read once for all of them, and each starts at the end of the topic. With
  workers, the clients of a topic another worker owns that their filters name are served by this
  worker's follower of it (``broker/spread.py``: one link to the owner, the entries read here once
  for all of them).
- ``$share/{group}/{filter}``: the Shared subscription named after the group (durable for a
  durable session), whose messages go round robin to the group's members, MQTT clients and
  Pulsar consumers alike.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

from magnetar.broker.consumer import Consumer
from magnetar.broker.errors import BrokerError
from magnetar.broker.follower_topic import MQTT_SUBSCRIBERS, FollowerTopic
from magnetar.broker.mqtt import access, remote
from magnetar.broker.mqtt.outbound import Delivery, MqttConsumer, MqttConsumerFromStart, cursor_of, delivery
from magnetar.broker.mqtt.session import FilterOptions, MqttSession
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol import wire
from magnetar.protocol.broadcast import BROADCAST_PROPERTY, BROADCAST_VALUE
from magnetar.protocol.mqtt import (
    MQTT_5,
    MqttError,
    Properties,
    Publish,
    ReasonCode,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
)
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
    from magnetar.broker.ownership import BrokerInfo
    from magnetar.broker.service import BrokerService
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic_api import Subscription

log = logging.getLogger(__name__)
R = ReasonCode
#: How long a consumer on a topic another worker owns waits to subscribe again after the owner
#: closed it (its bundle moved, the owner restarted).
REMOTE_RETRY_S = 0.5
#: The broadcast subscription of each topic that clients of sessions ending with their
#: connection share.
BROADCAST_SUBSCRIPTION = MQTT_SUBSCRIBERS


def handle_subscribe(cnx: MqttConnection, packet: Subscribe) -> None:
    session = cnx.session
    assert session is not None
    v5 = cnx.version == MQTT_5
    identifiers = packet.properties.subscription_identifiers
    subscription_id = identifiers[0] if identifiers else None
    failure = R.UNSPECIFIED_ERROR if v5 else SUBACK_FAILURE_3_1_1
    codes: list[int] = []
    wanted: list[str] = []
    new: set[str] = set()  # filters the session did not have (Retain Handling 1)
    for sub in packet.subscriptions:
        topic_filter = sub.topic_filter
        group, plain = split_filter(topic_filter)
        if group is not None and sub.no_local and v5:
            raise MqttError(R.PROTOCOL_ERROR, f"No Local on the shared subscription {topic_filter!r}")
        if not access.may_subscribe(cnx, topic_filter):
            codes.append(R.NOT_AUTHORIZED if v5 else SUBACK_FAILURE_3_1_1)
            continue
        domain, namespace, _ = _split(cnx, plain)
        if domain == NON_PERSISTENT or not _namespace_exists(cnx, namespace):
            codes.append(failure)
            continue
        if topic_filter not in session.filters:
            new.add(topic_filter)
        session.filters[topic_filter] = FilterOptions(
            sub.qos, sub.no_local, sub.retain_as_published, subscription_id
        )
        codes.append(sub.qos)
        wanted.append(topic_filter)
    attaching = asyncio.ensure_future(_subscribed(cnx, wanted))

    def answer(done: asyncio.Future[set[str]]) -> None:
        failed = done.result() if not done.cancelled() and done.exception() is None else set(wanted)
        answered = [
            failure if sub.topic_filter in failed and code < 0x80 else code
            for sub, code in zip(packet.subscriptions, codes, strict=True)
        ]
        cnx.send(SubAck(packet.packet_id, tuple(answered)))
        # Retained messages after the SUBACK (3.3.1.3), by each filter's Retain Handling; none
        # for a shared subscription (4.8.2).
        for sub, code in zip(packet.subscriptions, answered, strict=True):
            if code >= 0x80 or split_filter(sub.topic_filter)[0] is not None:
                continue
            if sub.retain_handling == 0 or (sub.retain_handling == 1 and sub.topic_filter in new):
                send_retained(cnx, sub.topic_filter, sub.qos, subscription_id)

    cnx.wait_for(attaching, answer)


def send_retained(cnx: MqttConnection, topic_filter: str, qos: int, subscription_id: int | None) -> None:
    """The retained messages of the topics ``topic_filter`` matches, with RETAIN, each at the lower
    of its QoS and the one granted."""
    domain, namespace, local_filter = _split(cnx, topic_filter)
    v5 = cnx.version == MQTT_5
    now = time.time()
    for message in cnx.server.retained.matching(namespace, local_filter, now):
        properties = Properties()
        if v5:
            expiry = None if message.expires_at is None else max(int(message.expires_at - now), 1)
            ids = () if subscription_id is None else (subscription_id,)
            properties = message.properties.replace(
                message_expiry_interval=expiry, subscription_identifiers=ids
            )
        shown = mqtt_topic(TopicName.parse(message.topic), bool(domain))
        cnx.outbound.send_alone(
            Publish(shown, message.payload, min(qos, message.qos), True, properties=properties)
        )


async def _subscribed(cnx: MqttConnection, filters: list[str]) -> set[str]:
    failed = await attach_filters(cnx, filters)
    await cnx.server.retained_current()  # with workers: what the others set, before it is sent
    session = cnx.session
    if session is not None and session.durable:
        await cnx.server.sessions.store.save(session)  # SUBACK once the subscription is durable
    return failed


def handle_unsubscribe(cnx: MqttConnection, packet: Unsubscribe) -> None:
    session = cnx.session
    assert session is not None
    codes = []
    for topic_filter in packet.topic_filters:
        existed = session.filters.pop(topic_filter, None) is not None
        codes.append(R.SUCCESS if existed else R.NO_SUBSCRIPTION_EXISTED)
    refresh(cnx)
    releasing = asyncio.ensure_future(cnx.server.sessions.release_unmatched(session))

    def answer(done: asyncio.Future[None]) -> None:
        if not done.cancelled() and (exc := done.exception()) is not None:
            log.error("%s: releasing the subscriptions of %r failed: %s", cnx.remote, session.client_id, exc)
        cnx.send(UnsubAck(packet.packet_id, tuple(codes) if cnx.version == MQTT_5 else ()))

    cnx.wait_for(releasing, answer)


def refresh(cnx: MqttConnection) -> None:
    """After the session's filters changed: each consumer takes its filters' options again, and
    one that no filter matches any more goes."""
    session = cnx.session
    assert session is not None
    namespace = default_namespace(cnx)
    for consumer in list(cnx.consumers_by_key.values()):
        topic = consumer.subscription.topic.name
        options = options_by_group(session, topic, namespace).get(consumer.group)
        if options is None:
            forget_consumer(cnx, consumer)
        else:
            consumer.delivery = _delivery(topic, options)


#: A filter of a resumed session that could not be attached (its subscription busy, a topic not
#: loading) is tried again after this many seconds, doubling up to ``RETRY_MAX_S``.
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0


def resume(cnx: MqttConnection) -> None:
    """A session taken up again: consumers for its filters once more, before the packets after
    its CONNECT are handled. A filter that fails to attach stays the session's (Session Present
    told the client it has it) and is tried again while the connection lasts."""
    session = cnx.session
    if session is not None and session.filters:
        attaching = asyncio.ensure_future(attach_filters(cnx, list(session.filters), forget=False))
        cnx.wait_for(attaching, lambda done: _retry_later(cnx, done, RETRY_FIRST_S))


def _retry_later(cnx: MqttConnection, done: asyncio.Future[set[str]], delay: float) -> None:
    failed = set() if done.cancelled() or done.exception() is not None else done.result()
    if failed and not cnx.closed:
        asyncio.get_running_loop().call_later(delay, _retry, cnx, failed, delay)


def _retry(cnx: MqttConnection, filters: set[str], delay: float) -> None:
    session = cnx.session
    if cnx.closed or session is None:
        return
    kept = [topic_filter for topic_filter in sorted(filters) if topic_filter in session.filters]
    if kept:
        attaching = asyncio.ensure_future(attach_filters(cnx, kept, forget=False))
        attaching.add_done_callback(lambda done: _retry_later(cnx, done, min(delay * 2, RETRY_MAX_S)))


async def attach_filters(cnx: MqttConnection, filters: list[str], forget: bool = True) -> set[str]:
    """Consumers on the topics ``filters`` match now; the filters that failed (forgotten by the
    session when ``forget``: a SUBSCRIBE refused them)."""
    session = cnx.session
    assert session is not None
    failed = set()
    for topic_filter in filters:
        try:
            for name in await _topics_of(cnx, topic_filter):
                await attach_topic(cnx, name, "latest")
        except Exception as exc:
            log.warning("%s: cannot subscribe to %r: %s", cnx.remote, topic_filter, exc)
            failed.add(topic_filter)
            if forget:
                session.filters.pop(topic_filter, None)
    return failed


class Options(NamedTuple):
    qos: int
    no_local: bool
    #: The matching filter named the namespace (``persistent://t/ns/...``): so do the messages.
    prefixed: bool
    retain_as_published: bool
    subscription_ids: tuple[int, ...]


def split_filter(topic_filter: str) -> tuple[str | None, str]:
    """(share name, plain filter) of ``$share/{group}/{filter}``; (None, the filter) otherwise."""
    shared = shared_filter(topic_filter)
    return (None, topic_filter) if shared is None else (shared.share_name, shared.topic_filter)


def options_by_group(
    session: MqttSession, name: TopicName, default_namespace: str
) -> dict[str | None, Options]:
    """What the session's filters that match ``name`` ask for, per share name (None: the filters
    that are not shared). A filter that names no namespace filters ``default_namespace``'s
    persistent topics."""
    try:
        local = decode_name(name.local_name)
    except UnicodeDecodeError:
        return {}
    found: dict[str | None, Options] = {}
    for topic_filter, options in session.filters.items():
        group, plain = split_filter(topic_filter)
        domain, namespace, local_filter = namespace_of_filter(plain, "", "")
        if domain:
            if domain != f"{name.domain}://" or namespace != name.namespace_name:
                continue
        elif name.domain != "persistent" or name.namespace_name != default_namespace:
            continue
        if not matches(local_filter, local):
            continue
        ids = () if options.subscription_id is None else (options.subscription_id,)
        before = found.get(group)
        if before is None:
            found[group] = Options(
                options.qos, options.no_local, bool(domain), options.retain_as_published, ids
            )
        else:
            found[group] = Options(
                max(options.qos, before.qos),
                # The client's own messages are left out only if every filter matching says
                # so: one without No Local still wants them (3.8.3.1).
                options.no_local and before.no_local,
                before.prefixed,
                options.retain_as_published or before.retain_as_published,
                before.subscription_ids + tuple(i for i in ids if i not in before.subscription_ids),
            )
    return found


def subscription_name(session: MqttSession, group: str | None) -> str:
    """The Pulsar subscription a session's consumer for ``group`` (None: not shared) is on."""
    if group is not None:
        return group
    return session.client_id if session.durable else BROADCAST_SUBSCRIPTION


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
    _, plain = split_filter(topic_filter)
    if not has_wildcard(plain):
        return [pulsar_topic(plain, config.mqtt_default_tenant, config.mqtt_default_namespace)]
    _, namespace, local_filter = _split(cnx, plain)
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


def _missing(session: MqttSession, topic: PersistentTopic, groups: Iterable[str | None]) -> list[str]:
    """The durable subscriptions the session needs on ``topic`` and that are not there yet."""
    if not session.durable:
        return []
    names = {subscription_name(session, group) for group in groups}
    return [name for name in names if name not in topic.subscriptions]


async def attach_topic(cnx: MqttConnection, name: TopicName, initial: str) -> None:
    """The client's consumers on the topic ``name`` (opened off the loop first, and its durable
    subscriptions made there, at the ``initial`` position, when they are new)."""
    service = cnx.service
    owner = remote.owner_elsewhere(service, name)
    if owner is not None:
        await _attach_remote(cnx, owner, name, initial)
        return
    opening = service.preparing(name)
    if opening is not None:
        await opening
    session = cnx.session
    if cnx.closed or session is None:
        return
    topic = service.get_topic(name, create=True)
    if not isinstance(topic, PersistentTopic):
        return
    for subscription in _missing(session, topic, options_by_group(session, name, default_namespace(cnx))):
        preparing = service.preparing(name, (subscription, initial))
        if preparing is not None:
            await preparing
    if cnx.closed:
        return
    topic = service.get_topic(name, create=True)  # the one loaded now (it may have been unloaded meanwhile)
    if isinstance(topic, PersistentTopic):
        _attach_now(cnx, session, topic)


def attach_loaded(cnx: MqttConnection, topic: PersistentTopic, initial: str = "latest") -> None:
    """The client's consumers on the loaded ``topic``, made where its filters match and it has
    none, their options brought up to date where it has; a durable subscription still to be
    made is made off the loop first (``attach_topic``)."""
    session = cnx.session
    if session is None or cnx.closed or not access.may_consume(cnx, topic.name):
        return
    wanted = options_by_group(session, topic.name, default_namespace(cnx))
    if not wanted:
        return
    if _missing(session, topic, wanted):
        task = asyncio.ensure_future(attach_topic(cnx, topic.name, initial))
        task.add_done_callback(lambda done: _logged(cnx, topic.name, done))
        return
    _attach_now(cnx, session, topic)


def _attach_now(cnx: MqttConnection, session: MqttSession, topic: PersistentTopic) -> None:
    """The consumers, on the loop (a durable subscription not made yet is made here)."""
    for group, options in options_by_group(session, topic.name, default_namespace(cnx)).items():
        _consumer(cnx, session, topic, group, options)


def _logged(cnx: MqttConnection, name: TopicName, done: asyncio.Future[None]) -> None:
    if not done.cancelled() and (exc := done.exception()) is not None:
        log.warning("%s: cannot subscribe to the topic %s: %s", cnx.remote, name, exc)


def _delivery(topic: TopicName, options: Options) -> Delivery:
    return delivery(
        mqtt_topic(topic, options.prefixed),
        options.qos,
        options.no_local,
        options.retain_as_published,
        options.subscription_ids,
    )


def _subscribe_command(
    session: MqttSession, key: str, subscription: str, group: str | None, consumer_id: int
) -> wire.CommandSubscribe:
    """SUBSCRIBE for the session's consumer of ``group`` (None: not shared) on the topic ``key``."""
    cmd = wire.CommandSubscribe(
        topic=key,
        subscription=subscription,
        sub_type=wire.CommandSubscribe.Exclusive,
        consumer_id=consumer_id,
        request_id=0,
        consumer_name=session.client_id,
        durable=session.durable,
        initial_position=wire.CommandSubscribe.Latest,
    )
    if group is not None:
        cmd.sub_type = wire.CommandSubscribe.Shared
    elif not session.durable:
        cmd.durable = False
        cmd.subscription_properties.add(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)
    return cmd


def _consumer(
    cnx: MqttConnection,
    session: MqttSession,
    topic: PersistentTopic | FollowerTopic,
    group: str | None,
    options: Options,
    from_start: bool = False,
) -> None:
    """The session's consumer for ``group`` on ``topic``, made if it has none (``from_start``: a
    broadcast one starts where its subscription is, not at the end of the topic)."""
    key = str(topic.name)
    subscription = subscription_name(session, group)
    existing = cnx.consumers_by_key.get((key, subscription))
    how = _delivery(topic.name, options)
    if existing is not None and not existing.closed:
        existing.delivery = how
        return
    consumer_id = cnx.next_id()
    cmd = _subscribe_command(session, key, subscription, group, consumer_id)
    kind = MqttConsumerFromStart if from_start else MqttConsumer

    def make(subscription: Subscription[Consumer]) -> Consumer:
        return kind(cnx, subscription, consumer_id, session.client_id, how, group)

    consumer = topic.subscribe(make, cmd)
    assert isinstance(consumer, MqttConsumer)
    _register(cnx, session, key, subscription, group, consumer)


def _register(
    cnx: MqttConnection,
    session: MqttSession,
    key: str,
    subscription: str,
    group: str | None,
    consumer: MqttConsumer,
) -> None:
    """``consumer`` in the connection's books (and its durable subscription in the session's), with
    its permits."""
    cnx.consumers_by_key[(key, subscription)] = consumer
    cnx.consumers[consumer.consumer_id] = consumer
    if session.durable:
        held = (key, group)
        if group is None and key not in session.topics:
            session.topics.add(key)
            cnx.server.sessions.store.update(session)  # so that its end deletes this one too
        elif group is not None and held not in session.groups:
            session.groups.add((key, group))
            cnx.server.sessions.store.update(session)
        if isinstance(consumer, remote.RemoteConsumer):
            consumer.check_delivered(session)
        elif (cursor := cursor_of(consumer)) is not None:
            session.watch_delivered(key, cursor)
    cnx.outbound.grant(consumer)


async def _attach_remote(cnx: MqttConnection, owner: BrokerInfo, name: TopicName, initial: str) -> None:
    """The client's consumers on ``name``, which the worker ``owner`` owns, through a session to
    it (remote.py); a durable subscription new there starts at ``initial``."""
    session = cnx.session
    if cnx.closed or session is None or not access.may_consume(cnx, name):
        return
    key = str(name)
    for group, options in options_by_group(session, name, default_namespace(cnx)).items():
        if group is None and not session.durable and _followed(cnx, session, name):
            await _attach_followed(cnx, session, name, options, initial)
            continue
        subscription = subscription_name(session, group)
        how = _delivery(name, options)
        existing = cnx.consumers_by_key.get((key, subscription))
        if existing is not None and not existing.closed:
            existing.delivery = how
            continue
        attaching = (key, subscription)
        if attaching in cnx.links.attaching:
            continue  # another SUBSCRIBE or notice is making it now
        cnx.links.attaching.add(attaching)
        try:
            cmd = _subscribe_command(session, key, subscription, group, cnx.links.new_id())
            if initial == "earliest":
                cmd.initial_position = wire.CommandSubscribe.Earliest
            consumer = await remote.subscribe(cnx, owner, name, cmd, how, group)
        finally:
            cnx.links.attaching.discard(attaching)
        if consumer is None or cnx.session is not session:
            return
        consumer.on_lost = lambda lost: _remote_lost(cnx, lost)
        _register(cnx, session, key, subscription, group, consumer)


def _followed(cnx: MqttConnection, session: MqttSession, name: TopicName) -> bool:
    """Whether the session's broadcast consumer on ``name``, which another worker owns, is served
    by this worker's follower of it (the spread on, with its links: ``Spread.active``): where one
    of its filters names the topic (a fleet's alerts), or the worker follows it already. A topic
    only a wildcard matches is not followed for it: a link is a connection to the owner, and a
    ``#`` over thousands of topics would take one each; it is a consumer on the worker's one
    session to the owner (``remote.py``) instead."""
    spread = cnx.service.spread
    if not spread.active or spread.link_factory is None:
        return False
    follower = spread.follower(name)
    if follower is not None and BROADCAST_SUBSCRIPTION in follower.subscriptions:
        return True
    config = cnx.config
    key = str(name)
    for topic_filter in session.filters:
        group, plain = split_filter(topic_filter)
        if group is not None or has_wildcard(plain):
            continue
        try:
            named = pulsar_topic(plain, config.mqtt_default_tenant, config.mqtt_default_namespace)
        except InvalidTopicName:
            continue
        if str(named) == key:
            return True
    return False


async def _attach_followed(
    cnx: MqttConnection, session: MqttSession, name: TopicName, options: Options, initial: str
) -> None:
    """The client's consumer of ``mqtt-subscribers`` on ``name``, which another worker owns: on
    this worker's follower of it (opened if it is not, with its link to the owner), which reads
    each entry once for all of this worker's MQTT clients and Pulsar broadcast consumers of it,
    as the owner does for its own. The owner sees one consumer of this worker's, however many
    clients it serves. ``initial`` "earliest": a topic created a moment ago, whose first
    messages the client gets too."""
    spread = cnx.service.spread
    cmd = _subscribe_command(session, str(name), BROADCAST_SUBSCRIPTION, None, 0)
    if initial == "earliest":
        cmd.initial_position = wire.CommandSubscribe.Earliest
    opening = spread.preparing(name, cmd)
    if opening is not None:
        await opening
    if cnx.closed or cnx.session is not session:
        return
    topic = spread.follower(name)
    if topic is None or BROADCAST_SUBSCRIPTION not in topic.subscriptions:
        # Closed since it was opened: the topic became this worker's own (its load attaches the
        # clients whose filters match it).
        raise BrokerError(f"{name} is not followed here now", wire.ServiceNotReady)
    _consumer(cnx, session, topic, None, options, from_start=initial == "earliest")


def closed_by_broker(cnx: MqttConnection, consumer: Consumer) -> None:
    """The broker closed one of the client's consumers. One of a topic loaded here (unloaded,
    deleted) comes back when the topic loads again (``MqttServer.topic_loaded``); one that a
    follower served (this worker owns the topic now: ``Spread.hand_back``) is attached again
    shortly, wherever the topic is served then (here: loaded for it)."""
    if isinstance(consumer.subscription.topic, FollowerTopic):
        _remote_lost(cnx, consumer)
    else:
        forget_consumer(cnx, consumer)


def _remote_lost(cnx: MqttConnection, consumer: Consumer) -> None:
    """The owner closed a consumer (its bundle moved, the owner restarted), or the follower serving
    it let it go: it goes, and the client subscribes again shortly, wherever the topic is served
    then."""
    forget_consumer(cnx, consumer)
    if cnx.closed:
        return
    name = consumer.subscription.topic.name

    def again() -> None:
        if not cnx.closed and cnx.session is not None:
            task = asyncio.ensure_future(attach_topic(cnx, name, "latest"))
            task.add_done_callback(lambda done: _logged(cnx, name, done))

    asyncio.get_running_loop().call_later(REMOTE_RETRY_S, again)


def forget_consumer(cnx: MqttConnection, consumer: Consumer) -> None:
    """Take ``consumer`` off its subscription and out of the connection's books."""
    key = (str(consumer.subscription.topic.name), consumer.subscription.name)
    if cnx.consumers_by_key.get(key) is consumer:
        del cnx.consumers_by_key[key]
    cnx.consumers.pop(consumer.consumer_id, None)
    if isinstance(consumer, MqttConsumer):
        cnx.outbound.forget(consumer)
    if not consumer.closed:
        consumer.subscription.remove_consumer(consumer)


def drop_all(cnx: MqttConnection) -> None:
    for consumer in list(cnx.consumers.values()):
        forget_consumer(cnx, consumer)


# -- durable subscriptions given up ---------------------------------------------------------------
async def drop_subscription(
    service: BrokerService,
    name: TopicName,
    subscription: str,
    keep_if: Callable[[PersistentSubscription], bool] | None = None,
) -> None:
    """Delete the durable ``subscription`` of the topic ``name`` (opened off the loop first if it
    exists and is not loaded; a topic that is gone has nothing to delete), unless ``keep_if()``
    says, once it is open, that someone still needs it."""
    key = str(name)
    owner = remote.owner_elsewhere(service, name)
    if owner is not None:  # another worker owns it: deleted there (kept while a member is on it)
        await remote.drop_subscription(service, owner, name, subscription)
        return
    if key not in service.topics:
        if not service.catalog.exists(key):
            return
        opening = service.preparing(name)
        if opening is not None:
            await opening
    topic = service.topics.get(key)
    if not isinstance(topic, PersistentTopic) or subscription not in topic.subscriptions:
        return
    if keep_if is not None and keep_if(topic.subscriptions[subscription]):
        return
    topic.drop_subscription(subscription, force=True)
