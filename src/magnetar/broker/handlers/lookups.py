"""Questions about topics rather than messages: LOOKUP, PARTITIONED_METADATA,
GET_TOPICS_OF_NAMESPACE, and the schema commands (GET_SCHEMA, GET_OR_CREATE_SCHEMA)."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING

from magnetar.broker import authorization
from magnetar.broker.errors import BrokerError, as_broker_error
from magnetar.broker.handlers.access import (
    authorize,
    authorize_name,
    check_served,
    opened_first,
    refuse_unauthorized,
    topic_name,
)
from magnetar.broker.request_errors import error_reply
from magnetar.protocol import Frame, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.topic_name import TopicName, filter_topics, topics_hash

if TYPE_CHECKING:
    from magnetar.broker.handlers.cnx import HandlerCnx


def handle_partitioned_metadata(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.partitioned_metadata
    reply = wire.CommandPartitionedTopicMetadataResponse(request_id=cmd.request_id)
    try:
        topic = topic_name(cmd.topic)
        authorize(cnx, topic, authorization.LOOKUP, "partitioned_metadata", "Get Partition Metadata")
        reply.partitions = cnx.service.partitions_of(topic, cmd.metadata_auto_creation_enabled)
        reply.response = wire.CommandPartitionedTopicMetadataResponse.Success
    except BrokerError as exc:
        cnx.send_command(wrap(error_reply(frame.type, cmd.request_id, exc.code, str(exc))))
        return
    cnx.send_command(wrap(reply))


def handle_lookup(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.lookup
    reply = wire.CommandLookupTopicResponse(request_id=cmd.request_id)
    try:
        topic = topic_name(cmd.topic)
        authorize(cnx, topic, authorization.LOOKUP, "lookup", "Lookup")
        reply.response = wire.CommandLookupTopicResponse.Connect
        if _spread_here(cnx, topic):
            # Its broadcast consumers are served where their connection is: the shared port (a
            # redirect there first, so that the lookup asked there and what follows share one
            # connection, whatever the client's service URL is spelt as). No owner is asked.
            url, tls_url = cnx.service.shared_service_urls
            if cnx.looked_up_spread is None:
                cnx.looked_up_spread = set()
            cnx.looked_up_spread.add(str(topic))
            if not cmd.authoritative:
                reply.response = wire.CommandLookupTopicResponse.Redirect
        else:
            # The owner of the topic's bundle (workers.md); this broker when it is alone.
            owner = cnx.service.owner_of(topic)
            url = cnx.service.service_url if owner is None else owner.service_url
            tls_url = cnx.service.service_url_tls if owner is None else owner.service_url_tls
        if url is not None:  # None: TLS only
            reply.broker_service_url = url
        if tls_url is not None:
            # Clients on pulsar+ssl:// connect here (the official ones take this field then).
            reply.broker_service_url_tls = tls_url
        reply.authoritative = True
        reply.proxy_through_service_url = False
    except BrokerError as exc:
        cnx.send_command(wrap(error_reply(frame.type, cmd.request_id, exc.code, str(exc))))
        return
    cnx.send_command(wrap(reply))


def _spread_here(cnx: HandlerCnx, topic: TopicName) -> bool:
    """Whether a LOOKUP of ``topic`` on this connection names the shared port (spread.py): a
    spread topic, unless something only its owner serves was asked for it here before."""
    pinned = cnx.owner_pinned
    return cnx.service.spread.is_spread(topic) and (pinned is None or str(topic) not in pinned)


def handle_get_topics_of_namespace(cnx: HandlerCnx, frame: Frame) -> None:
    """Listed on the listing thread (``BrokerService.listing_topics``), answered on the loop. A
    regex subscription's ``topics_pattern`` is evaluated there too (Pulsar's
    enableBrokerSideSubscriptionPatternEvaluation): the answer has the matching topics only."""
    cmd = frame.command.get_topics_of_namespace
    request_id = cmd.request_id
    known_hash = cmd.topics_hash if cmd.HasField("topics_hash") else None
    config = cnx.service.config
    evaluated = (
        cmd.HasField("topics_pattern")
        and config.enable_broker_side_subscription_pattern_evaluation
        and len(cmd.topics_pattern) <= config.subscription_pattern_max_length
    )
    pattern = cmd.topics_pattern if evaluated else None
    try:
        authz = cnx.service.authorization
        if authz is not None and not authz.can_list_topics(cmd.namespace, cnx.auth.role):
            refuse_unauthorized(cnx, "get_topics", "Get Topics Of Namespace", cmd.namespace)
        listing = cnx.service.listing_topics(
            cmd.namespace, cmd.mode, partial(topics_reply, request_id, known_hash, pattern)
        )
    except BrokerError as exc:
        cnx.send_error(request_id, exc)
        return
    listing.add_done_callback(partial(_listed, cnx, request_id))


def topics_reply(
    request_id: int, known_hash: str | None, pattern: str | None, topics: list[str]
) -> wire.CommandGetTopicsOfNamespaceResponse:
    """The answer, the topics ``pattern`` matches (``filtered``) when there is one this broker
    can evaluate, with Pulsar's topic-list hash of what it lists: a client that has that hash
    already gets no list (``changed`` false)."""
    matching = filter_topics(topics, pattern) if pattern is not None else None
    if matching is not None:
        topics = matching
    digest = topics_hash(topics)
    reply = wire.CommandGetTopicsOfNamespaceResponse(
        request_id=request_id, filtered=matching is not None, topics_hash=digest
    )
    if known_hash == digest:
        reply.changed = False
    else:
        reply.topics.extend(topics)
    return reply


def _listed(cnx: HandlerCnx, request_id: int, listing: asyncio.Future) -> None:
    if cnx.closed or listing.cancelled():
        return
    failure = listing.exception()
    if isinstance(failure, Exception):
        cnx.send_error(request_id, as_broker_error(failure, "listing topics"))
        return
    cnx.send_command(wrap(listing.result()))


def handle_get_schema(cnx: HandlerCnx, frame: Frame) -> None:
    cnx.send_command(wrap(cnx.service.schemas.get_schema_response(frame.command.get_schema)))


def handle_get_or_create_schema(cnx: HandlerCnx, frame: Frame) -> None:
    cmd = frame.command.get_or_create_schema
    reply = wire.CommandGetOrCreateSchemaResponse(request_id=cmd.request_id)
    try:
        # Pulsar's broker checks nothing here, but adds schemas to existing topics only; ours
        # creates the topic, so only a role that may produce there may ask.
        authorize_name(cnx, cmd.topic, authorization.PRODUCE, "produce", "Produce")
        check_served(cnx, cmd.topic)
    except BrokerError as exc:
        reply.error_code = wire.ServerError.ValueType(exc.code)
        reply.error_message = str(exc)
        cnx.send_command(wrap(reply))
        return
    if opened_first(cnx, frame, cmd.topic, cmd.request_id):
        return
    try:
        topic = cnx.service.get_topic(topic_name(cmd.topic), create=True)
        reply.schema_version = cnx.service.schemas.for_producer(topic.name, cmd.schema) or b""
    except BrokerError as exc:
        reply.error_code = wire.ServerError.ValueType(exc.code)
        reply.error_message = str(exc)
    cnx.send_command(wrap(reply))
