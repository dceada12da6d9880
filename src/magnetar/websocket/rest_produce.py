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
The messages are sent by one producer per partition on an in-process session, under the
request's credentials, so a role without ``produce`` is refused and deduplication applies.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.broker.schemas.registry import TYPE_NAMES, StoredSchema, parse_version, schema_id, to_wire
from magnetar.protocol import wire
from magnetar.websocket.http_session import open_session, refusal, refused, topic_of
from magnetar.websocket.json_shapes import (
    OutgoingMessage,
    ProduceRequest,
    message_id_text,
    parse_produce_request,
    produce_answer,
)
from magnetar.websocket.local_producer import LocalProducer
from magnetar.websocket.session import LocalSession, SessionError

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)

#: ``errorCode`` of a message that was not stored (Pulsar: 2, "retry with another broker" aside).
PUBLISH_ERROR = 2
#: Room beyond ``max_message_size`` for the JSON around a request's messages.
_BODY_ROOM = 1024 * 1024


class Encoder:
    """A message's text as the schema's bytes (Pulsar's ``encodeWithSchema``)."""

    _PACKED = {"INT8": ">b", "INT16": ">h", "INT32": ">i", "INT64": ">q", "TIME": ">q", "TIMESTAMP": ">q"}
    _FLOATS = {"FLOAT": ">f", "DOUBLE": ">d"}
    TYPES = frozenset({"STRING", "BYTES", "NONE", "JSON", "BOOLEAN", *_PACKED, *_FLOATS})

    def __init__(self, schema_type: str) -> None:
        if schema_type not in self.TYPES:
            raise ValueError(
                f"REST produce does not encode {schema_type} payloads (it does {sorted(self.TYPES)})"
            )
        self.type = schema_type

    def encode(self, text: str) -> bytes:
        """ValueError when ``text`` is not a value of the schema's type."""
        kind = self.type
        if kind in ("STRING", "BYTES", "NONE"):
            return text.encode()
        if kind == "JSON":
            return json.dumps(json.loads(text), separators=(",", ":")).encode()
        if kind == "BOOLEAN":
            return b"\x01" if text.strip().lower() == "true" else b"\x00"
        if kind in self._FLOATS:
            return struct.pack(self._FLOATS[kind], float(text))
        try:
            return struct.pack(self._PACKED[kind], int(text))
        except struct.error as exc:
            raise ValueError(f"{text!r} is out of range for {kind}: {exc}") from None


def _schema_data(info: dict[str, Any]) -> bytes:
    """A ``SchemaInfo``'s ``schema``: base64 (Jackson's bytes), or the definition as text or JSON."""
    value = info.get("schema")
    if value in (None, ""):
        return b""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":")).encode()
    if not isinstance(value, str):
        raise ValueError("a SchemaInfo's schema must be base64, text or JSON")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error, or not ASCII: the definition itself
        return value.encode()


def request_schema(service: BrokerService, topic: TopicName, request: ProduceRequest) -> wire.Schema:
    """The schema the request's producer registers (ValueError for one it cannot use)."""
    sid = schema_id(topic)
    if request.schema_version is not None:
        stored = service.schemas.get(topic, request.schema_version)
        if stored is None or stored.deleted:
            raise LookupError(f"schema version {request.schema_version} of {sid} not found")
        return to_wire(sid, stored)
    if request.key_schema is not None:
        raise ValueError("keySchema (KEY_VALUE schemas) is not supported by REST produce here")
    info = request.value_schema or {"type": "STRING"}
    kind = str(info["type"]).upper()
    if kind not in TYPE_NAMES:
        raise ValueError(f"unknown schema type {info['type']!r}")
    properties = info.get("properties") or {}
    if not isinstance(properties, dict):
        raise ValueError("a SchemaInfo's properties must be an object")
    stored = StoredSchema(0, kind, _schema_data(info), {str(k): str(v) for k, v in properties.items()})
    schema = to_wire(sid, stored)
    schema.SerializeToString()  # ValueError (a property protobuf cannot carry) before it is sent
    return schema


def handler(service: BrokerService, domain: str):
    async def produce(request: web.Request) -> web.StreamResponse:
        topic = topic_of(request, domain)
        targets = _targets(service, request, topic)
        body = await _read_body(request, 2 * service.config.max_message_size + _BODY_ROOM)
        try:
            produce_request = parse_produce_request(body)
            schema = request_schema(service, topic, produce_request)
            encoder = Encoder(_type_name(schema))
        except LookupError as exc:
            raise refusal(404, str(exc)) from None
        except ValueError as exc:
            raise refusal(400, str(exc)) from None
        try:
            session = await open_session(service, request, query_token=False)
        except SessionError as exc:
            raise refused(exc, "publish") from None
        try:
            return await _publish(session, targets, produce_request, schema, encoder)
        finally:
            session.close()

    return produce


def _type_name(schema: wire.Schema) -> str:
    name = wire.Schema.Type.Name(schema.type)
    return {"None": "BYTES", "String": "STRING", "Json": "JSON", "Bool": "BOOLEAN"}.get(name, name.upper())


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
    session: LocalSession,
    targets: list[TopicName],
    request: ProduceRequest,
    schema: wire.Schema,
    encoder: Encoder,
) -> web.Response:
    producers: dict[int, LocalProducer] = {}
    results: list[dict[str, Any]] = [{} for _ in request.messages]
    sends: list[tuple[int, asyncio.Future[wire.MessageIdData]]] = []
    for index, (text, message) in enumerate(request.messages):
        slot = message.partition if message.partition is not None else index % len(targets)
        if len(targets) > 1 and message.partition is not None and slot >= len(targets):
            results[index] = _error(f"the topic has no partition {slot}")
            continue
        slot = slot if len(targets) > 1 else 0
        try:
            producer = producers.get(slot)
            if producer is None:
                producer = producers[slot] = await LocalProducer.create(
                    session, targets[slot], request.producer_name, schema
                )
            payload = encoder.encode(text)
        except SessionError as exc:
            if not producers:
                raise refused(exc, "publish") from None
            results[index] = _error(str(exc))
            continue
        except ValueError as exc:
            results[index] = _error(f"the payload is not a {encoder.type} value: {exc}")
            continue
        message_with_payload = OutgoingMessage(
            payload,
            message.properties,
            message.key,
            message.event_time,
            message.sequence_id,
            message.replication_clusters,
            message.disable_replication,
            message.deliver_at,
            message.deliver_after_ms,
        )
        sends.append((index, producer.send(message_with_payload)))
    for index, future in sends:
        try:
            results[index] = {"messageId": message_id_text(await future), "errorCode": 0, "schemaVersion": 0}
        except SessionError as exc:
            results[index] = _error(str(exc))
    version = next((p.schema_version for p in producers.values() if p.schema_version is not None), None)
    schema_version = parse_version(version) if version else None
    return web.json_response(produce_answer(results, -1 if schema_version is None else schema_version))


def _error(message: str) -> dict[str, Any]:
    return {"errorCode": PUBLISH_ERROR, "errorMsg": message, "schemaVersion": 0}
