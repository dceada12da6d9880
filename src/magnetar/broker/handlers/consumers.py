"""A connection's consumers: SUBSCRIBE (limits, schema), FLOW, ACK, redelivery, CLOSE_CONSUMER,
UNSUBSCRIBE, SEEK, and the questions a consumer asks (GET_LAST_MESSAGE_ID, CONSUMER_STATS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker import authorization, offloaded_reads
from magnetar.broker.consumer import Consumer
from magnetar.broker.errors import REQUEST_ERRORS, BrokerError, NotAllowed, as_broker_error
from magnetar.broker.follower_topic import FollowerSubscription, FollowerTopic
from magnetar.broker.handlers import acks_on_disk
from magnetar.broker.handlers.access import (
    authorize_name,
    followed_first,
    opened_first,
    served_or_followed,
    topic_name,
)
from magnetar.broker.names import check_name
from magnetar.broker.namespace_service import ServiceUnitNotReady
from magnetar.broker.offloaded_reads import PatientReader
from magnetar.broker.subscription import PersistentSubscription
from magnetar.broker.subscription_type import SubscriptionType
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol import Frame, ProtocolError, wire
from magnetar.protocol.broadcast import wants_broadcast
from magnetar.protocol.commands import wrap
from magnetar.protocol.message_id import to_u64
from magnetar.protocol.topic_name import InvalidTopicName, TopicName
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.handlers.cnx import HandlerCnx
    from magnetar.broker.topic_api import Subscription


def handle_subscribe(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.subscribe
    if cmd.consumer_id in cnx.consumers:
        # The client retried a subscribe that already succeeded.
        cnx.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))
        return
    try:  # before anything is opened or created for them
        check_name(cmd.subscription, "subscription name")
        check_name(cmd.consumer_name, "consumer name")
        authorize_name(cnx, cmd.topic, authorization.CONSUME, "subscribe", "subscribe")
        followed = served_or_followed(cnx, cmd)
        _check_consumer_limits(cnx, cmd.topic, cmd.subscription)  # a refused one creates nothing
    except BrokerError as exc:
        cnx.send_error(cmd.request_id, exc)
        if isinstance(exc, ServiceUnitNotReady) and cmd.topic in (cnx.owner_pinned or ()):
            # Sent on to a spread topic's owner (access.pin_to_owner). The official client takes
            # a consumer whose SUBSCRIBE is refused so for connected, and does not retry it
            # ("Ignoring reconnection request since we're already connected") until its operation
            # times out; a CLOSE_CONSUMER, as after an unload, makes it look the topic up again.
            request_id = cnx.next_close_request_id()
            cnx.send_command(
                wrap(wire.CommandCloseConsumer(consumer_id=cmd.consumer_id, request_id=request_id))
            )
        return
    if followed:  # a broadcast consumer of a spread topic this worker does not own
        if not followed_first(cnx, frame, cmd):
            _subscribe_follower(cnx, cmd)
        return
    initial = "earliest" if cmd.initial_position == wire.CommandSubscribe.Earliest else "latest"
    subscription = (cmd.subscription, initial) if cmd.durable else None
    if opened_first(cnx, frame, cmd.topic, cmd.request_id, subscription):
        return
    try:
        topic = cnx.service.get_topic(topic_name(cmd.topic), create=True)
        if cmd.HasField("schema"):
            cnx.service.schemas.for_subscribe(topic, cmd.schema)
        existing = topic.subscriptions.get(cmd.subscription)
        if (
            isinstance(existing, PersistentSubscription)
            and existing.dispatcher is None
            and wants_broadcast(cmd)
        ):
            # Before its dispatcher restores the places stored for it: after a seek (the spread's
            # count of resets), none stored before it is resumed from.
            cnx.service.spread.watch_resets(topic.name, existing)
        name = cmd.consumer_name or f"consumer-{cmd.consumer_id}"

        def make(subscription: Subscription[Consumer]) -> Consumer:
            meta = cmd.key_shared_meta if cmd.HasField("key_shared_meta") else None
            return Consumer(cnx, subscription, cmd.consumer_id, name, cmd.priority_level, meta)

        consumer = topic.subscribe(make, cmd)
    except REQUEST_ERRORS as exc:
        what = f"subscribing {cmd.subscription} to {cmd.topic}"
        cnx.send_error(cmd.request_id, as_broker_error(exc, what))
        return
    if isinstance(topic, PersistentTopic):
        topic.watch_chunks(consumer, cnx.client_version)
        opened = topic.subscriptions.get(cmd.subscription)
        if opened is not None and opened.kind is SubscriptionType.Broadcast:
            cnx.service.spread.mark(topic.name)  # its broadcast consumers go to every worker now
            cnx.service.spread.watch_resets(topic.name, opened)
    cnx.consumers[cmd.consumer_id] = consumer
    cnx.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))
    if topic.terminated:  # after the SUCCESS, so the client knows the consumer id
        consumer.subscription.check_end_of_topic()


def _subscribe_follower(cnx: HandlerCnx, cmd: wire.CommandSubscribe) -> None:
    """A broadcast consumer served by this worker's follower of the topic (spread.py)."""
    try:
        name = topic_name(cmd.topic)
        topic = cnx.service.spread.follower(name)
        if topic is None:  # closed since it was opened (the topic became this worker's own)
            cnx.service.check_served_here(name)
            raise BrokerError(f"{name} is not served by this worker now", wire.ServiceNotReady)
        if cmd.HasField("schema"):
            cnx.service.schemas.for_subscribe(topic, cmd.schema)
        consumer_name = cmd.consumer_name or f"consumer-{cmd.consumer_id}"

        def make(subscription: Subscription[Consumer]) -> Consumer:
            return Consumer(cnx, subscription, cmd.consumer_id, consumer_name, cmd.priority_level)

        consumer = topic.subscribe(make, cmd)
    except REQUEST_ERRORS as exc:
        cnx.send_error(cmd.request_id, as_broker_error(exc, f"subscribing {cmd.subscription} to {cmd.topic}"))
        return
    cnx.consumers[cmd.consumer_id] = consumer
    cnx.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))


def _check_consumer_limits(cnx: HandlerCnx, topic_name: str, subscription: str) -> None:
    """Raise LimitReached (ConsumerBusy) when one more consumer is past a limit (limits.py);
    a topic not loaded has no consumer yet."""
    try:
        name = TopicName.parse(topic_name)
    except InvalidTopicName:
        return  # the handler answers the error
    policies = cnx.service.namespaces.policies(name.namespace_name)
    topic = cnx.service.topics.get(str(name))
    subscriptions = topic.subscriptions if topic is not None else {}
    existing = subscriptions.get(subscription)
    counts = (
        lambda: sum(len(s.consumers) for s in subscriptions.values()),
        len(existing.consumers) if existing is not None else 0,
        len(cnx.consumers),
    )
    namespace_max = (policies.max_consumers_per_topic, policies.max_consumers_per_subscription)
    cnx.service.limits.check_consumer(str(name), subscription, counts, namespace_max, cnx.remote)


def _live_consumer(cnx: HandlerCnx, consumer_id: int) -> Consumer | None:
    """The consumer, None if it was closed (late commands are normal), else a protocol error."""
    consumer = cnx.consumers.get(consumer_id)
    if consumer is None and consumer_id not in cnx.gone_consumers:
        raise ProtocolError(f"unknown consumer id {consumer_id}")
    return consumer


def _known_consumer(cnx: HandlerCnx, consumer_id: int, request_id: int) -> Consumer | None:
    """The consumer a request names; None (ConsumerNotFound answered) if there is none."""
    consumer = cnx.consumers.get(consumer_id)
    if consumer is None:
        cnx.send_error(request_id, BrokerError("unknown consumer", wire.ConsumerNotFound))
    return consumer


def handle_flow(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.flow
    consumer = _live_consumer(cnx, cmd.consumer_id)
    if consumer is None:
        return
    consumer.subscription.flow(consumer, cmd.message_permits)


def handle_ack(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.ack
    consumer = _live_consumer(cnx, cmd.consumer_id)
    error: BrokerError | None = None
    on_disk = acks_on_disk.asked(cmd)
    if consumer is not None and on_disk != acks_on_disk.CHECK:
        try:
            consumer.subscription.acknowledge(cmd, consumer)
        except BrokerError as exc:
            error = exc
    if cmd.HasField("request_id"):
        reply = wire.CommandAckResponse(consumer_id=cmd.consumer_id, request_id=cmd.request_id)
        if error is not None:
            reply.error = wire.ServerError.ValueType(error.code)
            reply.message = str(error)
        elif consumer is None:
            reply.error = wire.ConsumerNotFound
            reply.message = f"unknown consumer id {cmd.consumer_id}"
        elif on_disk:  # a home worker's MQTT session asks (acks_on_disk.py)
            cursor = getattr(consumer.subscription, "cursor", None)
            if isinstance(cursor, ManagedCursor) and cursor.durable:
                positions = [Position(one.ledger_id, one.entry_id) for one in cmd.message_id]
                acks_on_disk.answer_when_on_disk(cnx, consumer, cursor, positions, reply)
                return
        cnx.send_command(wrap(reply))


def handle_redeliver_unacknowledged_messages(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.redeliver_unacknowledged_messages
    consumer = _live_consumer(cnx, cmd.consumer_id)
    if consumer is not None:
        consumer.subscription.redeliver(consumer, list(cmd.message_ids))


def handle_close_consumer(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.close_consumer
    consumer = cnx.consumers.pop(cmd.consumer_id, None)
    cnx.forget_consumer(cmd.consumer_id)
    if consumer is not None:
        consumer.leave_chunk_watch(keep=False)  # its client closed it: nothing of it is kept
        consumer.subscription.remove_consumer(consumer)
    cnx.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))


def handle_unsubscribe(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.unsubscribe
    if (consumer := _known_consumer(cnx, cmd.consumer_id, cmd.request_id)) is None:
        return
    subscription = consumer.subscription
    try:
        if isinstance(subscription, FollowerSubscription):  # asked of the owner (the spread)

            def unsubscribed(error: BrokerError | None) -> None:
                if error is None:
                    cnx.forget_consumer(cmd.consumer_id)
                _answer(cnx, cmd.request_id, error)

            subscription.unsubscribe_at_owner(consumer, unsubscribed)
            return
        subscription.unsubscribe(consumer)
    except BrokerError as exc:
        cnx.send_error(cmd.request_id, exc)
        return
    cnx.forget_consumer(cmd.consumer_id)
    cnx.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))


def handle_get_last_message_id(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.get_last_message_id
    if (consumer := _known_consumer(cnx, cmd.consumer_id, cmd.request_id)) is None:
        return
    topic = consumer.subscription.topic
    cursor = consumer.subscription.cursor
    if not isinstance(topic, (PersistentTopic, FollowerTopic)) or cursor is None:
        cnx.send_error(cmd.request_id, NotAllowed("non-persistent topics keep no last message id"))
        return
    reader = PatientReader(topic.ml)
    read_compacted = consumer.read_compacted
    offloaded_reads.answer(
        topic.ml,
        lambda: topic.last_message_position(read_compacted, reader),
        f"the last message id of {topic.name}",
        lambda found, error: _last_message_id(cnx, consumer, cmd.request_id, found, error),
    )


def _last_message_id(
    cnx: HandlerCnx,
    consumer: Consumer,
    request_id: int,
    found: tuple[Position, int] | None,
    error: BaseException | None,
) -> None:
    """Answer GET_LAST_MESSAGE_ID (at once, or once an offloaded last entry is read)."""
    if cnx.closed:
        return
    if found is None:
        cnx.send_error(request_id, _request_error(error, "reading the last message id"))
        return
    topic, cursor = consumer.subscription.topic, consumer.subscription.cursor
    assert isinstance(topic, (PersistentTopic, FollowerTopic)) and cursor is not None
    position, batch_index = found
    last = wire.MessageIdData(ledger_id=to_u64(position.ledger_id), entry_id=to_u64(position.entry_id))
    if batch_index >= 0:
        last.batch_index = batch_index
    if topic.partition_index >= 0:
        last.partition = topic.partition_index
    reply = wire.CommandGetLastMessageIdResponse(request_id=request_id, last_message_id=last)
    mark = cursor.mark_delete_position
    reply.consumer_mark_delete_position.CopyFrom(
        wire.MessageIdData(ledger_id=to_u64(mark.ledger_id), entry_id=to_u64(mark.entry_id))
    )
    cnx.send_command(wrap(reply))


def handle_seek(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.seek
    if (consumer := _known_consumer(cnx, cmd.consumer_id, cmd.request_id)) is None:
        return
    subscription = consumer.subscription
    if isinstance(subscription, FollowerSubscription):  # done by the owner (the spread)
        subscription.seek(cmd, lambda error: _answer(cnx, cmd.request_id, error))
        return
    topic = subscription.topic
    try:
        if not isinstance(topic, PersistentTopic) or not isinstance(subscription, PersistentSubscription):
            # non-persistent: nothing stored to seek in
            raise NotAllowed("seek is not supported on non-persistent topics")
        compacted = topic.compaction if consumer.read_compacted else None
        exactly = False
        if cmd.HasField("message_id"):
            if compacted is not None:  # into the compacted view where the id is up to its horizon
                position, exactly = compacted.seek_position(cmd.message_id)
            else:
                position = topic.seek_position(cmd.message_id)
        elif cmd.HasField("message_publish_time"):
            if compacted is not None:
                position, exactly = compacted.time_position(cmd.message_publish_time)
            else:
                # A search by time reads entries: offloaded ones are fetched without blocking the loop.
                reader, stamp = PatientReader(topic.ml), cmd.message_publish_time
                offloaded_reads.answer(
                    topic.ml,
                    lambda: topic.find_position_by_time(stamp, reader),
                    f"seeking {topic.name} by time",
                    lambda found, error: _seek_to(cnx, consumer, cmd.request_id, found, error),
                )
                return
        else:
            raise BrokerError("seek needs a message id or a publish time", wire.NotAllowedError)
    except BrokerError as exc:
        cnx.send_error(cmd.request_id, exc)
        return
    _seek_to(cnx, consumer, cmd.request_id, position, None, exactly)


def _seek_to(
    cnx: HandlerCnx,
    consumer: Consumer,
    request_id: int,
    position: Position | None,
    error: BaseException | None,
    exactly: bool = False,
) -> None:
    """Reset the consumer's subscription to ``position`` (``exactly``: as ``reset_cursor``) and
    answer the SEEK (or its error)."""
    if cnx.closed:
        return
    if position is None:
        cnx.send_error(request_id, _request_error(error, "seeking by time"))
        return
    if consumer.closed:  # closed while an offloaded entry was fetched: the seek is void
        closed = BrokerError("the consumer was closed during the seek", wire.ConsumerNotFound)
        cnx.send_error(request_id, closed)
        return
    subscription = consumer.subscription
    assert isinstance(subscription, PersistentSubscription)
    subscription.reset_cursor(position, exactly)
    cnx.send_command(wrap(wire.CommandSuccess(request_id=request_id)))


def _answer(cnx: HandlerCnx, request_id: int, error: BrokerError | None) -> None:
    """Answer a request done elsewhere (by a topic's owner) once it is: SUCCESS or the error."""
    if cnx.closed:
        return
    if error is not None:
        cnx.send_error(request_id, error)
    else:
        cnx.send_command(wrap(wire.CommandSuccess(request_id=request_id)))


def _request_error(error: BaseException | None, what: str) -> BrokerError:
    """A failed answer's error as the client gets it (storage's: PersistenceError, said once)."""
    if isinstance(error, Exception) and isinstance(error, REQUEST_ERRORS):
        return as_broker_error(error, what)
    return BrokerError(f"{what} failed: {error}")


def handle_consumer_stats(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.consumer_stats
    reply = wire.CommandConsumerStatsResponse(request_id=cmd.request_id)
    consumer = cnx.consumers.get(cmd.consumer_id)
    if consumer is None:
        reply.error_code = wire.ConsumerNotFound
        reply.error_message = f"unknown consumer id {cmd.consumer_id}"
    else:
        reply.consumer_name = consumer.name
        reply.available_permits = max(consumer.permits, 0)
        reply.unacked_messages = sum(consumer.pending_acks.values())
        cursor = consumer.subscription.cursor
        reply.msg_backlog = cursor.backlog() if cursor is not None else 0
        reply.address = cnx.remote
    cnx.send_command(wrap(reply))
