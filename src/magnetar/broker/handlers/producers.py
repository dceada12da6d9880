"""A connection's producers: PRODUCER (limits, schema, access mode), CLOSE_PRODUCER, and a
producer the broker closes (CLOSE_PRODUCER to the client). Their sends: ``publish.py``."""

from __future__ import annotations

import itertools
from functools import partial
from typing import TYPE_CHECKING

from magnetar.broker import authorization
from magnetar.broker.errors import REQUEST_ERRORS, BrokerError, as_broker_error
from magnetar.broker.handlers.access import authorize_name, check_served, opened_first, topic_name
from magnetar.broker.names import check_name
from magnetar.broker.producer import DEDUPLICATED_PROPERTY, Producer
from magnetar.protocol import Frame, wire
from magnetar.protocol.commands import wrap

if TYPE_CHECKING:
    from magnetar.broker.handlers.cnx import HandlerCnx

_producer_names = itertools.count()


def handle_producer(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.producer
    try:
        check_name(cmd.producer_name, "producer name")  # before anything is opened for it
        authorize_name(cnx, cmd.topic, authorization.PRODUCE, "produce", "Produce")
        check_served(cnx, cmd.topic)
    except BrokerError as exc:
        cnx.send_error(cmd.request_id, exc)
        return
    if opened_first(cnx, frame, cmd.topic, cmd.request_id):
        return
    try:
        if (existing := cnx.producers.get(cmd.producer_id)) is not None:
            # A retried request for a producer we already created: answer the same.
            ready = existing in existing.topic.producers.values()
            _producer_success(cnx, cmd.request_id, existing, ready)
            return
        producer, ready = _add_producer(cnx, cmd)
    except REQUEST_ERRORS as exc:
        cnx.send_error(cmd.request_id, as_broker_error(exc, f"creating a producer on {cmd.topic}"))
        return
    cnx.producers[cmd.producer_id] = producer
    _producer_success(cnx, cmd.request_id, producer, ready)


def _add_producer(cnx: HandlerCnx, cmd: wire.CommandProducer) -> tuple[Producer, bool]:
    """A new producer on its topic, and whether it is ready (an exclusive one may wait for its turn)."""
    service = cnx.service
    topic = service.get_topic(topic_name(cmd.topic), create=True)
    _check_producer_limits(cnx, topic)
    schema = cmd.schema if cmd.HasField("schema") else None
    schema_version = service.schemas.for_producer(topic.name, schema)
    user_named = bool(cmd.producer_name)
    name = cmd.producer_name or f"{service.broker_name}-{next(_producer_names)}"
    producer = Producer(cnx, topic, cmd.producer_id, name, user_named, cmd.producer_access_mode)
    producer.schema_version = schema_version
    if any(kv.key == DEDUPLICATED_PROPERTY and kv.value == "true" for kv in cmd.metadata):
        producer.deduplicated = True
    producer.on_ready = partial(_producer_success, cnx, cmd.request_id)
    return producer, topic.add_producer(producer)


def _producer_success(cnx: HandlerCnx, request_id: int, producer: Producer, ready: bool = True) -> None:
    reply = wire.CommandProducerSuccess(
        request_id=request_id,
        producer_name=producer.name,
        last_sequence_id=producer.topic.last_sequence_id(producer.name),
        producer_ready=ready,
    )
    if producer.access_mode != wire.Shared:
        reply.topic_epoch = producer.topic.topic_epoch
    if producer.schema_version is not None:
        reply.schema_version = producer.schema_version
    cnx.send_command(wrap(reply))


def _check_producer_limits(cnx: HandlerCnx, topic) -> None:
    """Raise LimitReached (ProducerBusy) when one more producer is past a limit (limits.py)."""
    policies = cnx.service.namespaces.policies(topic.name.namespace_name)
    namespace_max = policies.max_producers_per_topic
    on_topic, here = len(topic.producers), len(cnx.producers)
    cnx.service.limits.check_producer(str(topic.name), on_topic, here, namespace_max, cnx.remote)


def close_by_broker(cnx: HandlerCnx, producer_id: int, producer: object) -> None:
    """The broker closed ``producer`` (``ServerCnx.close_producer_by_broker``): tell the client;
    the sends it had on the way are dropped (``publish.handle_send``)."""
    if cnx.producers.get(producer_id) is producer:
        del cnx.producers[producer_id]
        cnx.forget_producer(producer_id)
        request_id = cnx.next_close_request_id()
        cnx.send_command(wrap(wire.CommandCloseProducer(producer_id=producer_id, request_id=request_id)))


def handle_close_producer(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.close_producer
    producer = cnx.producers.pop(cmd.producer_id, None)
    if producer is not None:
        producer.closed = True
        producer.topic.remove_producer(producer)
    cnx.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))
