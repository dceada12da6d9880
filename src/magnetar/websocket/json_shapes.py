"""The JSON of Pulsar's WebSocket API and REST produce API, read and written without I/O.

Shapes as Pulsar's ``pulsar-websocket`` data classes (``ProducerMessage``, ``ProducerAck``,
``ConsumerMessage``, ``ConsumerCommand``, ``EndOfTopicResponse``, ``ProducerMessages``,
``ProducerAcks``): message ids are the base64 of the serialized ``MessageIdData`` (what the
official clients' ``MessageId.serialize`` writes), payloads base64 on the WebSocket API, times as
Java's ``ISO_OFFSET_DATE_TIME`` in the broker's time zone (Pulsar's ``DateFormatter``).
Anything malformed is a ``BadInput`` naming Pulsar's ``WebSocketError`` code.
"""

from __future__ import annotations

import base64
import datetime
import enum
import functools
import json
import time
from dataclasses import dataclass, field
from typing import Any

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.message_id import INT64_MAX, parse_message_id


class WebSocketError(enum.IntEnum):
    """Pulsar's ``WebSocketError`` codes (the ``send-error:N`` results; close codes 4000 + N)."""

    FailedToCreateProducer = 1
    FailedToSubscribe = 2
    FailedToDeserializeFromJSON = 3
    FailedToSerializeToJSON = 4
    AuthenticationError = 5
    NotAuthorizedError = 6
    PayloadEncodingError = 7
    UnknownError = 8

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]

    @property
    def close_code(self) -> int:
        """The WebSocket close code: RFC 6455 keeps 4000-4999 for applications (codes under 1000
        are not valid close codes), so Pulsar's code N closes with 4000 + N."""
        return 4000 + int(self)


_DESCRIPTIONS = {
    WebSocketError.FailedToCreateProducer: "Failed to create producer",
    WebSocketError.FailedToSubscribe: "Failed to subscribe",
    WebSocketError.FailedToDeserializeFromJSON: "Failed to de-serialize from JSON",
    WebSocketError.FailedToSerializeToJSON: "Failed to serialize to JSON",
    WebSocketError.AuthenticationError: "Failed to authenticate client",
    WebSocketError.NotAuthorizedError: "Client is not authorized",
    WebSocketError.PayloadEncodingError: "Invalid payload encoding",
    WebSocketError.UnknownError: "Unknown error",
}


class BadInput(ValueError):
    """Input that cannot be used, with the error Pulsar reports for it and the request's context."""

    def __init__(self, error: WebSocketError, message: str, context: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.context = context


# -- message ids --------------------------------------------------------------------------------
def encode_message_id(message_id: wire.MessageIdData) -> str:
    return base64.b64encode(message_id.SerializeToString()).decode()


def decode_message_id(text: object) -> wire.MessageIdData:
    """A base64 message id (as sent by this API or the official clients' ``serialize``)."""
    if not isinstance(text, str) or not text:
        raise ValueError("messageId must be a base64 string")
    try:
        data = base64.b64decode(text, validate=True)
        return parse_message_id(data)
    except (ValueError, ProtocolError) as exc:  # binascii.Error, not ASCII, not a MessageIdData
        raise ValueError(f"messageId {text!r} is not a message id: {exc}") from None


def message_id_text(message_id: wire.MessageIdData) -> str:
    """Java's ``MessageIdImpl.toString()``, ``ledger:entry:partition``: the REST produce answer's form."""
    return f"{_signed(message_id.ledger_id)}:{_signed(message_id.entry_id)}:{message_id.partition}"


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# -- times ----------------------------------------------------------------------------------------
def format_time(epoch_ms: int) -> str:
    """``epoch_ms`` as Java's ``ISO_OFFSET_DATE_TIME`` in the local zone: fraction digits only as
    needed (``.785``, ``.78``, none), ``Z`` for UTC, else ``+HH:MM``."""
    seconds, millis = divmod(epoch_ms, 1000)
    text, offset = _second(seconds, time.tzname)
    if millis:
        text += f".{millis:03d}".rstrip("0")
    return text + offset


@functools.lru_cache(maxsize=64)
def _second(seconds: int, zone: tuple[str, str]) -> tuple[str, str]:
    """One second's date-time text and offset in the local ``zone`` (a burst of messages shares its
    second: formatting it is most of a consumer message's cost when not cached)."""
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).astimezone()
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    offset = moment.utcoffset() or datetime.timedelta(0)
    if not offset:
        return text, "Z"
    total = int(offset.total_seconds())
    sign = "+" if total >= 0 else "-"
    hours, rest = divmod(abs(total), 3600)
    minutes, secs = divmod(rest, 60)
    return text, f"{sign}{hours:02d}:{minutes:02d}" + (f":{secs:02d}" if secs else "")


def parse_time(value: object) -> int:
    """An event time: ISO-8601 with an offset (Pulsar's ``DateFormatter.parse``), or epoch ms."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise ValueError(f"eventTime {value!r} is not a date-time")
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"eventTime {value!r} is not an ISO-8601 date-time with an offset") from None
    if moment.tzinfo is None:
        raise ValueError(f"eventTime {value!r} has no offset (e.g. Z or +02:00)")
    return round(moment.timestamp() * 1000)


# -- what a producer sends ------------------------------------------------------------------------
@dataclass(slots=True)
class OutgoingMessage:
    """One message to publish, as both APIs describe it."""

    payload: bytes
    properties: dict[str, str] = field(default_factory=dict)
    key: str | None = None
    event_time: int | None = None
    sequence_id: int | None = None
    replication_clusters: list[str] | None = None
    disable_replication: bool = False
    deliver_at: int | None = None
    deliver_after_ms: int | None = None
    context: str | None = None
    #: The partition asked for (REST produce), or None.
    partition: int | None = None
    #: The key is base64 of bytes (a KEY_VALUE schema's key: ``partition_key_b64_encoded``).
    key_b64: bool = False


def parse_producer_message(text: str | bytes) -> OutgoingMessage:
    """A WebSocket producer's message (``payload`` base64); BadInput names what is wrong."""
    try:
        body = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(WebSocketError.FailedToDeserializeFromJSON, str(exc)) from None
    if not isinstance(body, dict):
        raise BadInput(WebSocketError.FailedToDeserializeFromJSON, "a message is a JSON object")
    context = _context(body.get("context"))
    payload = body.get("payload")
    if not isinstance(payload, str):
        raise BadInput(WebSocketError.PayloadEncodingError, "payload must be a base64 string", context)
    try:
        data = base64.b64decode(payload, validate=True)
    except ValueError as exc:  # binascii.Error, or a character that is not ASCII
        reason = f"Invalid Base64 message-payload error={exc}"
        raise BadInput(WebSocketError.PayloadEncodingError, reason, context) from None
    message = _common_fields(body, context, WebSocketError.FailedToDeserializeFromJSON)
    message.payload = data
    parse_event_time(body, message)
    return message


def _context(value: object) -> str | None:
    """Pulsar's ``context`` is a string; a number is taken as its text (as Jackson does)."""
    if value is None:
        return None
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise BadInput(WebSocketError.FailedToDeserializeFromJSON, "context must be a string")


def _common_fields(body: dict[str, Any], context: str | None, error: WebSocketError) -> OutgoingMessage:
    """The fields both APIs share (all but the payload)."""
    message = OutgoingMessage(b"", context=context)
    properties = body.get("properties")
    if properties is not None:
        if not isinstance(properties, dict) or not all(_text(k) and _text(v) for k, v in properties.items()):
            raise BadInput(error, "properties must be an object of strings", context)
        message.properties = properties
    key = body.get("key")
    if key is not None:
        if not _text(key):
            raise BadInput(error, "key must be a string", context)
        message.key = key
    clusters = body.get("replicationClusters")
    if clusters is not None:
        if not isinstance(clusters, list) or not all(_text(c) for c in clusters):
            raise BadInput(error, "replicationClusters must be a list of strings", context)
        message.replication_clusters = clusters
    message.disable_replication = body.get("disableReplication") is True
    for name in ("sequenceId", "deliverAt", "deliverAfterMs", "partition"):
        value = body.get(name)
        if value is not None and not _long(value):
            raise BadInput(error, f"{name} must be an integer from 0 to 2^63 - 1", context)
    message.sequence_id = body.get("sequenceId")
    message.deliver_at = body.get("deliverAt") or None
    message.deliver_after_ms = body.get("deliverAfterMs") or None
    message.partition = body.get("partition")
    return message


def _text(value: object) -> bool:
    """A string that protobuf can carry (JSON may hold lone surrogates, which UTF-8 cannot)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _long(value: object) -> bool:
    """A non-negative Java long (what sequence ids and times are on the wire)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX


def parse_event_time(body: dict[str, Any], message: OutgoingMessage) -> None:
    """The WebSocket API's ``eventTime`` (a date-time: Pulsar's ``DateFormatter``)."""
    value = body.get("eventTime")
    if value in (None, ""):
        return
    try:
        message.event_time = parse_time(value)
    except ValueError as exc:
        raise BadInput(WebSocketError.PayloadEncodingError, str(exc), message.context) from None
    if not _long(message.event_time):
        raise BadInput(WebSocketError.PayloadEncodingError, "eventTime is before 1970", message.context)


def producer_ack(message_id: wire.MessageIdData, context: str | None) -> str:
    """Written by hand: the id is base64 (nothing to escape), only the context is JSON-encoded."""
    text = '{"result": "ok", "messageId": "' + encode_message_id(message_id)
    if context is None:
        return text + '"}'
    return text + '", "context": ' + json.dumps(context) + "}"


def producer_error(error: WebSocketError, message: str, context: str | None) -> str:
    reply: dict[str, Any] = {"result": f"send-error:{int(error)}", "errorMsg": message}
    if context is not None:
        reply["context"] = context
    return json.dumps(reply)


# -- what a consumer receives and sends ---------------------------------------------------------------
@dataclass(slots=True)
class IncomingMessage:
    """One message as a consumer or reader delivers it."""

    message_id: wire.MessageIdData
    payload: bytes
    properties: dict[str, str]
    publish_time: int
    redelivery_count: int
    event_time: int = 0
    key: str | None = None


def consumer_message(message: IncomingMessage) -> str:
    """Pulsar's ``ConsumerMessage``: ``eventTime`` only when set, ``key`` only when there is one.
    Written by hand, as ``json.dumps`` of the object would write it: ids, payloads (base64) and
    times need no escaping, so only the properties and the key go through the JSON encoder."""
    properties = json.dumps(message.properties) if message.properties else "{}"
    parts = [
        '{"messageId": "',
        encode_message_id(message.message_id),
        '", "payload": "',
        base64.b64encode(message.payload).decode(),
        '", "properties": ',
        properties,
        ', "publishTime": "',
        format_time(message.publish_time),
        '", "redeliveryCount": ',
        str(message.redelivery_count),
    ]
    if message.event_time:
        parts += [', "eventTime": "', format_time(message.event_time), '"']
    if message.key is not None:
        parts += [', "key": ', json.dumps(message.key)]
    parts.append("}")
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class ConsumerCommand:
    """Pulsar's ``ConsumerCommand``: an ack (no ``type``), or ``negativeAcknowledge``, ``permit``,
    ``unsubscribe``, ``isEndOfTopic``."""

    type: str
    message_id: wire.MessageIdData | None = None
    permit_messages: int = 0


_COMMANDS = ("ack", "negativeAcknowledge", "permit", "unsubscribe", "isEndOfTopic")


def parse_consumer_command(text: str | bytes) -> ConsumerCommand:
    """BadInput (FailedToDeserializeFromJSON, as Pulsar closes the session with) for anything else."""
    error = WebSocketError.FailedToDeserializeFromJSON
    try:
        body = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(error, str(exc)) from None
    if not isinstance(body, dict):
        raise BadInput(error, "a command is a JSON object")
    kind = body.get("type") or "ack"
    if kind not in _COMMANDS:
        raise BadInput(error, f"unknown command type {kind!r}")
    if kind == "permit":
        permits = body.get("permitMessages")
        if not isinstance(permits, int) or isinstance(permits, bool) or permits <= 0:
            raise BadInput(error, "Missing required permitMessages field for 'permit' command")
        return ConsumerCommand(kind, permit_messages=permits)
    if kind in ("ack", "negativeAcknowledge"):
        try:
            return ConsumerCommand(kind, decode_message_id(body.get("messageId")))
        except ValueError as exc:
            raise BadInput(error, str(exc)) from None
    return ConsumerCommand(kind)


def end_of_topic(reached: bool) -> str:
    return json.dumps({"endOfTopic": reached})


# -- REST produce (PIP-64) ----------------------------------------------------------------------------
@dataclass(slots=True)
class ProduceRequest:
    """Pulsar's ``ProducerMessages``: the messages' payloads are text, encoded by the schema."""

    messages: list[tuple[str, OutgoingMessage]]
    producer_name: str | None = None
    schema_version: int | None = None
    key_schema: dict[str, Any] | None = None
    value_schema: dict[str, Any] | None = None


def parse_produce_request(text: str | bytes) -> ProduceRequest:
    """ValueError (answered 400) for a body that is not a ``ProducerMessages``."""
    try:
        body = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object with messages")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    producer_name = body.get("producerName")
    if producer_name is not None and not _text(producer_name):
        raise ValueError("producerName must be a string")
    version = body.get("schemaVersion", -1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError("schemaVersion must be an integer")
    request = ProduceRequest(
        [],
        producer_name or None,
        None if version < 0 else version,
        _schema_info(body.get("keySchema"), "keySchema"),
        _schema_info(body.get("valueSchema"), "valueSchema"),
    )
    for index, item in enumerate(messages):
        if not isinstance(item, dict):
            raise ValueError(f"messages[{index}] must be a JSON object")
        payload = item.get("payload")
        if not isinstance(payload, str):
            raise ValueError(f"messages[{index}].payload must be a string")
        try:
            message = _common_fields(item, None, WebSocketError.PayloadEncodingError)
        except BadInput as exc:
            raise ValueError(f"messages[{index}]: {exc}") from None
        event_time = item.get("eventTime")
        if event_time not in (None, ""):
            try:  # REST produce takes epoch milliseconds (Pulsar's Long.parseLong)
                message.event_time = int(event_time)
            except (TypeError, ValueError):
                message.event_time = -1
            if not _long(message.event_time):
                raise ValueError(f"messages[{index}].eventTime must be epoch milliseconds")
        request.messages.append((payload, message))
    return request


def _schema_info(value: object, name: str) -> dict[str, Any] | None:
    """A ``SchemaInfo`` given as JSON text (Pulsar's form) or as an object."""
    if value in (None, ""):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{name} is not JSON: {exc}") from None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError(f"{name} must be a SchemaInfo with a type")
    return value


def produce_answer(results: list[dict[str, Any]], schema_version: int) -> dict[str, Any]:
    """Pulsar's ``ProducerAcks``."""
    return {"messagePublishResults": results, "schemaVersion": schema_version}
