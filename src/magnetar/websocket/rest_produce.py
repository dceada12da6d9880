"""Pulsar's REST produce API (PIP-64, its broker's ``TopicsBase``): ``POST /topics/{domain}/{tenant}/
{namespace}/{topic}`` and ``.../partitions/{n}``.

The body is a ``ProducerMessages``: ``producerName``, a schema (``valueSchema`` / ``keySchema``
as ``SchemaInfo`` JSON, or ``schemaVersion``; a STRING schema when none is given, as Pulsar) and
``messages`` with ``payload`` (text, encoded by the schema), ``key``, ``properties``, ``eventTime``
(epoch ms), ``sequenceId``, ``replicationClusters``, ``disableReplication``, ``deliverAt``,
``deliverAfterMs``, and here also ``partition``. The answer is a ``ProducerAcks``: per message its
id (``ledger:entry:partition``) or an error (``errorCode`` 2 and ``errorMsg``), and the schema
version, once every message is stored (on disk) or refused. A partitioned topic's messages go to
``partition`` when given, else round robin over the partitions, as Pulsar's broker sends them.
The messages are sent by one producer per partition on the session of its owner, under the
request's credentials, so a role without ``produce`` is refused and deduplication applies.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.broker.schemas.registry import StoredSchema, parse_version, schema_id, to_wire
from magnetar.protocol import wire
from magnetar.websocket.http_session import refusal, refused, sessions_for, topic_of
from magnetar.websocket.json_shapes import (
    ProduceRequest,
    message_id_text,
    parse_produce_request,
    produce_answer,
)
from magnetar.websocket.local_producer import LocalProducer
from magnetar.websocket.rest_schemas import MessageEncoder, key_value_schema, parse_schema_info
from magnetar.websocket.session import SessionError

if TYPE_CHECKING:
    from magnetar.broker.schemas.compatibility import SchemaData
    from magnetar.broker.service import BrokerService
    from magnetar.protocol.topic_name import TopicName
    from magnetar.websocket.sessions import Sessions

log = logging.getLogger(__name__)

#: ``errorCode`` of a message that was not stored (Pulsar: 2, "retry with another broker" aside).
PUBLISH_ERROR = 2
#: A payload is JSON text: one byte of it takes at most 6 in the body (``\u0001``).
_JSON_ESCAPE = 6
#: Room for the rest of a request: the other fields, the schema, more messages.
_BODY_ROOM = 1024 * 1024


def max_body_size(max_message_size: int) -> int:
    """The largest request body: one message of ``max_message_size`` however its text is
    escaped in JSON, and 1 MiB more (aiohttp's own default limit would be 1 MiB in all)."""
    return _JSON_ESCAPE * max_message_size + _BODY_ROOM


def request_schema(
    service: BrokerService, topic: TopicName, request: ProduceRequest
) -> tuple[wire.Schema, SchemaData]:
    """The schema the request's producer registers, on the wire and as data (ValueError for one
    it cannot use, LookupError for a version the topic does not have)."""
    sid = schema_id(topic)
    if request.schema_version is not None:
        stored = service.schemas.get(topic, request.schema_version)
        if stored is None or stored.deleted:
            raise LookupError(f"schema version {request.schema_version} of {sid} not found")
        return to_wire(sid, stored), stored.schema
    value = parse_schema_info(request.value_schema or {"type": "STRING"})
    data = value.schema
    if request.key_schema is not None:
        data = key_value_schema(parse_schema_info(request.key_schema), value)
    schema = to_wire(sid, StoredSchema(0, data.type, bytes(data.data), dict(data.properties)))
    schema.SerializeToString()  # ValueError (a property protobuf cannot carry) before it is sent
    return schema, data


def handler(service: BrokerService, domain: str):
    async def produce(request: web.Request) -> web.StreamResponse:
        topic = topic_of(request, domain)
        targets = _targets(service, request, topic)
        body = await _read_body(request, max_body_size(service.config.max_message_size))
        try:
            produce_request = parse_produce_request(body)
            schema, data = request_schema(service, topic, produce_request)
            encoder = MessageEncoder(data)
        except LookupError as exc:
            raise refusal(404, str(exc)) from None
        except ValueError as exc:
            raise refusal(400, str(exc)) from None
        sessions = sessions_for(service, request, query_token=False)
        try:
            return await _publish(sessions, targets, produce_request, schema, encoder)
        finally:
            sessions.close()

    return produce


def _targets(service: BrokerService, request: web.Request, topic: TopicName) -> list[TopicName]:
    """The partition a ``.../partitions/{n}`` path names, every partition of a partitioned topic,
    or the topic."""
    count = service.namespaces.partitions(str(topic))
    if "partition" in request.match_info:
        if topic.partition_index >= 0:
            raise refusal(400, "Topic name can't contain '-partition-' suffix.")
        try:
            partition = int(request.match_info["partition"])
        except ValueError:
            raise refusal(400, f"partition {request.match_info['partition']!r} is not a number") from None
        if not 0 <= partition < count:
            raise refusal(404, f"{topic} has no partition {partition} (it has {count})")
        return [topic.partition(partition)]
    return [topic.partition(i) for i in range(count)] if count else [topic]


async def _read_body(request: web.Request, limit: int) -> bytes:
    """The body, refused with 413 past ``limit`` (before it is all read)."""
    if request.content_length is not None and request.content_length > limit:
        raise refusal(413, f"the request body of {request.content_length} bytes is over {limit}")
    chunks, size = [], 0
    while chunk := await request.content.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise refusal(413, f"the request body is over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _publish(
    sessions: Sessions,
    targets: list[TopicName],
    request: ProduceRequest,
    schema: wire.Schema,
    encoder: MessageEncoder,
) -> web.Response:
    producers: dict[int, LocalProducer] = {}
    results: list[dict[str, Any]] = [{} for _ in request.messages]
    sends: list[tuple[int, int, asyncio.Future[wire.MessageIdData]]] = []
    for index, (text, message) in enumerate(request.messages):
        slot = message.partition if message.partition is not None else index % len(targets)
        if len(targets) > 1 and message.partition is not None and slot >= len(targets):
            results[index] = _error(f"the topic has no partition {slot}", slot)
            continue
        slot = slot if len(targets) > 1 else 0
        partition = targets[slot].partition_index
        try:
            producer = producers.get(slot)
            if producer is None:
                producer = producers[slot] = await LocalProducer.create(
                    await sessions.for_topic(targets[slot]), targets[slot], request.producer_name, schema
                )
            message.payload = encoder.value.encode(text)
        except SessionError as exc:
            if not producers:
                raise _refused(exc) from None
            results[index] = _error(str(exc), partition)
            continue
        except ValueError as exc:
            results[index] = _error(f"the payload is not a {encoder.type} value: {exc}", partition)
            continue
        if message.key is not None:
            try:
                message.key, message.key_b64 = encoder.encode_key(message.key)
            except ValueError as exc:
                assert encoder.key is not None
                results[index] = _error(f"the key is not a {encoder.key.type} value: {exc}", partition)
                continue
        sends.append((index, partition, producer.send(message)))
    for index, partition, future in sends:
        try:
            results[index] = {"messageId": message_id_text(await future), "errorCode": 0, "schemaVersion": 0}
        except SessionError as exc:
            results[index] = _error(str(exc), partition)
    version = next((p.schema_version for p in producers.values() if p.schema_version is not None), None)
    schema_version = parse_version(version) if version else None
    return web.json_response(produce_answer(results, -1 if schema_version is None else schema_version))


def _refused(exc: SessionError) -> web.HTTPException:
    """The request refused by the broker: as the WebSocket API answers, but a role without
    ``produce`` gets 401, as Pulsar's ``TopicsBase.validateProducePermission`` answers it."""
    if exc.code == wire.AuthorizationError:
        return refusal(401, f"Unauthorized to produce: {exc}")
    return refused(exc, "publish")


def _error(message: str, partition: int) -> dict[str, Any]:
    """A message not stored, as Pulsar's ``ProducerAck`` says it: its ``messageId`` is the index
    of the partition it was for (-1: not partitioned), ``errorCode`` 2 and ``errorMsg`` why."""
    return {"errorMsg": message, "messageId": str(partition), "errorCode": PUBLISH_ERROR, "schemaVersion": 0}
