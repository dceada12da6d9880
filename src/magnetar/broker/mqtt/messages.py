"""MQTT messages as Pulsar messages and back: the payload untouched, MQTT 5 User Properties as
the Pulsar message's properties (in order, duplicates kept: both allow them), and the other
PUBLISH properties a subscriber must get as properties under Pulsar's MQTT handler's (MoP's)
names, ``MQTT_PROPERTIES_{identifier}_``:

| MQTT 5 property | Pulsar property | value |
|---|---|---|
| User Property ``k: v`` | ``k`` | ``v`` (MoP's ``MQTT_PROPERTIES_38_k`` is read back too) |
| Payload Format Indicator | ``MQTT_PROPERTIES_1_`` | ``0`` or ``1`` |
| Message Expiry Interval | ``MQTT_PROPERTIES_2_`` | when it expires, in seconds since the epoch (MoP's) |
| Content Type | ``MQTT_PROPERTIES_3_`` | as given |
| Response Topic | ``MQTT_PROPERTIES_8_`` | as given |
| Correlation Data | ``MQTT_PROPERTIES_9_`` | the bytes as UTF-8 text when they are that ... |
| ... else | ``MQTT_PROPERTIES_9_base64`` | ... in base64 |
| RETAIN flag | ``MQTT_RETAIN`` | ``true``, only when set (for Retain As Published) |
| QoS of the PUBLISH | ``MQTT_QOS`` | ``0``, ``1`` or ``2``: no subscriber gets it at a higher QoS |

What an MQTT PUBLISH becomes is what a Pulsar producer would send: metadata with the producer
name and sequence id deduplication reads, the publish time, the properties; the CRC32C over
them (``encode_headers_and_payload``). A stored entry goes the other way: a batch is taken apart
into its messages and a compressed one decompressed, since an MQTT subscriber gets one PUBLISH
per message; a Pulsar producer's message may carry the properties above and its MQTT subscribers
get them as MQTT 5 properties. A message without ``MQTT_QOS`` (a Pulsar producer's, the Spark sink's,
a REST or WebSocket one) is sent at the QoS each subscriber was granted: it was stored durably
and receipted, as an MQTT QoS 2 message is, so nothing in it asks for less (MoP sends every
message at the granted QoS); a Pulsar producer may set ``MQTT_QOS`` to ask for less.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Sequence
from typing import NamedTuple

from magnetar.broker.entries import DispatchEntry
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.batch import iter_batch_properties, properties_of
from magnetar.protocol.compression import DecompressionError, decompress
from magnetar.protocol.headers import encode_headers_and_payload, parse_metadata
from magnetar.protocol.mqtt import Properties
from magnetar.protocol.mqtt.properties import NONE

log = logging.getLogger(__name__)

#: The Pulsar property marking a message published with RETAIN (for Retain As Published).
RETAIN_PROPERTY = "MQTT_RETAIN"
#: The Pulsar property holding the QoS a message was published with (MQTT 3.3.5 / 5.0 3.8.4: it is
#: never delivered at a higher one).
QOS_PROPERTY = "MQTT_QOS"
#: The QoS of a message without ``QOS_PROPERTY`` (not published over MQTT): the granted one.
ANY_QOS = 2
#: MoP's prefix of the MQTT 5 properties kept as Pulsar properties.
PREFIX = "MQTT_PROPERTIES_"
PAYLOAD_FORMAT = "MQTT_PROPERTIES_1_"
EXPIRES_AT = "MQTT_PROPERTIES_2_"
CONTENT_TYPE = "MQTT_PROPERTIES_3_"
RESPONSE_TOPIC = "MQTT_PROPERTIES_8_"
CORRELATION = "MQTT_PROPERTIES_9_"
CORRELATION_BASE64 = "MQTT_PROPERTIES_9_base64"
USER_PROPERTY = "MQTT_PROPERTIES_38_"


def pulsar_properties(
    properties: Properties, now_s: float, retain: bool = False, qos: int | None = None
) -> list[tuple[str, str]]:
    """A PUBLISH's (or a will's) properties as the Pulsar message's, in the order above."""
    out = list(properties.user_properties)
    if properties.payload_format_indicator is not None:
        out.append((PAYLOAD_FORMAT, str(properties.payload_format_indicator)))
    if properties.message_expiry_interval is not None:
        out.append((EXPIRES_AT, str(int(now_s) + properties.message_expiry_interval)))
    if properties.content_type is not None:
        out.append((CONTENT_TYPE, properties.content_type))
    if properties.response_topic is not None:
        out.append((RESPONSE_TOPIC, properties.response_topic))
    if properties.correlation_data is not None:
        try:
            out.append((CORRELATION, properties.correlation_data.decode("utf-8")))
        except UnicodeDecodeError:
            out.append((CORRELATION_BASE64, base64.b64encode(properties.correlation_data).decode()))
    if retain:
        out.append((RETAIN_PROPERTY, "true"))
    if qos is not None:
        out.append((QOS_PROPERTY, _QOS_TEXT[qos]))
    return out


_QOS_TEXT = ("0", "1", "2")


def to_pulsar(
    payload: bytes,
    properties: Properties,
    producer: str,
    sequence_id: int,
    now_ms: int,
    retain: bool = False,
    qos: int | None = None,
) -> tuple[wire.MessageMetadata, bytes]:
    """The metadata and the producer's bytes of an MQTT message published at ``now_ms``."""
    metadata = wire.MessageMetadata(producer_name=producer, sequence_id=sequence_id, publish_time=now_ms)
    for key, value in pulsar_properties(properties, now_ms / 1000, retain, qos):
        metadata.properties.add(key=key, value=value)
    return metadata, encode_headers_and_payload(metadata, payload)


class Outgoing(NamedTuple):
    """One message of a stored entry, as an MQTT subscriber gets it."""

    payload: bytes
    #: Its User Properties.
    properties: tuple[tuple[str, str], ...]
    #: It was published with RETAIN (sent so to a subscription with Retain As Published).
    retain: bool = False
    #: Its other MQTT 5 properties (Payload Format Indicator, Content Type, Response Topic,
    #: Correlation Data).
    mqtt: Properties = NONE
    #: When it expires (seconds since the epoch); None: never.
    expires_at: int | None = None
    #: The QoS it was published with: it goes out at no higher one (``ANY_QOS``: not over MQTT).
    qos: int = ANY_QOS


def outgoing(payload: bytes, properties: Sequence[tuple[str, str]]) -> Outgoing:
    """A message with these Pulsar properties, as an MQTT subscriber gets it; a property of MQTT's
    whose value does not read is passed over."""
    return tuple.__new__(Outgoing, (payload, *_outgoing_rest(properties)))


#: An ``Outgoing`` less its payload (its other fields, in order).
Rest = tuple[tuple[tuple[str, str], ...], bool, Properties, int | None, int]


def _outgoing_rest(properties: Sequence[tuple[str, str]]) -> Rest:
    user: list[tuple[str, str]] = []
    retain = False
    expires_at: int | None = None
    qos = ANY_QOS
    fields: dict[str, object] = {}
    for key, value in properties:
        if not key.startswith(PREFIX) and key != RETAIN_PROPERTY and key != QOS_PROPERTY:
            user.append((key, value))
            continue
        try:
            if key == RETAIN_PROPERTY:
                retain = value == "true"
            elif key == QOS_PROPERTY:
                qos = min(max(int(value), 0), ANY_QOS)
            elif key == PAYLOAD_FORMAT:
                fields["payload_format_indicator"] = 1 if int(value) else 0
            elif key == EXPIRES_AT:
                expires_at = int(value)
            elif key == CONTENT_TYPE:
                fields["content_type"] = value
            elif key == RESPONSE_TOPIC:
                fields["response_topic"] = value
            elif key == CORRELATION:
                fields["correlation_data"] = value.encode()
            elif key == CORRELATION_BASE64:
                fields["correlation_data"] = base64.b64decode(value, validate=True)
            elif key.startswith(USER_PROPERTY):
                user.append((key[len(USER_PROPERTY) :], value))
            else:
                user.append((key, value))  # a property of MoP's we do not map: as it is
        except (ValueError, binascii.Error):
            log.debug("the property %s=%r does not read as MQTT's", key, value)
    mqtt = Properties(**fields) if fields else NONE  # type: ignore[arg-type]  # the names above are its fields
    return tuple(user) if user else (), retain, mqtt, expires_at, qos


#: The properties' bytes of batched messages (``iter_batch_properties``) -> what they make of an
#: ``Outgoing``: the messages of a batch mostly carry the same (``MQTT_QOS`` alone, from an MQTT
#: publisher), read once here rather than per message. Only properties of at most
#: ``_REST_KEY_MAX`` bytes are kept, and all are forgotten together past ``_RESTS_MAX``: a
#: producer whose every message has properties of its own costs what it did, never memory.
_RESTS: dict[bytes, Rest] = {}
_RESTS_MAX = 4096
_REST_KEY_MAX = 1024


def _rest_of(key: bytes) -> Rest:
    rest = _RESTS.get(key)
    if rest is None:
        rest = _outgoing_rest(properties_of(key))
        if len(key) <= _REST_KEY_MAX:
            if len(_RESTS) >= _RESTS_MAX:
                _RESTS.clear()
            _RESTS[key] = rest
    return rest


def from_entry(entry: DispatchEntry) -> list[Outgoing] | None:
    """The messages of ``entry``; None for one an MQTT subscriber cannot be sent (a chunk of a
    chunked message, bytes that do not read as a message)."""
    metadata = entry.metadata
    if metadata is None or metadata.HasField("chunk_id") or metadata.HasField("uuid"):
        return None
    try:
        _, body = parse_metadata(entry.payload_for(False))
        if metadata.compression:
            data: bytes | memoryview = decompress(metadata.compression, body, metadata.uncompressed_size)
        else:
            data = body
        if not metadata.HasField("num_messages_in_batch"):
            return [outgoing(bytes(data), _pairs(metadata.properties))]
        new = tuple.__new__
        messages: list[Outgoing] = []
        for key, single, payload in iter_batch_properties(data, metadata.num_messages_in_batch):
            rest = _rest_of(key) if single is None else _outgoing_rest(_pairs(single.properties))
            messages.append(new(Outgoing, (bytes(payload), *rest)))
        return messages
    except (ProtocolError, DecompressionError) as exc:
        log.warning("entry %s cannot go to MQTT subscribers: %s", entry.position, exc)
        return None


def _pairs(properties: Sequence[wire.KeyValue]) -> list[tuple[str, str]]:
    return [(kv.key, kv.value) for kv in properties]
