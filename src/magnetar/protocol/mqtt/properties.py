"""MQTT 5 properties (2.2.2): one dataclass for all of them, read and written by one table.

Each property has an identifier, a data type and the packets it may appear in; an identifier
that is unknown or not valid for its packet is a Malformed Packet, and one given twice (but
User Property, and Subscription Identifier in a PUBLISH) a Protocol Error (2.2.2.2). Values
the standard bounds (Receive Maximum 0, a Topic Alias 0, a flag byte other than 0 or 1 ...) are
Protocol Errors where it says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import Any

from magnetar.protocol.mqtt import primitives as p
from magnetar.protocol.mqtt.codes import PacketType
from magnetar.protocol.mqtt.errors import malformed, protocol_error


class Kind(Enum):
    BYTE = 1
    U16 = 2
    U32 = 3
    VARINT = 4
    UTF8 = 5
    BINARY = 6
    PAIR = 7


#: Where a property may appear: a packet type, or "will" for a CONNECT's Will Properties.
WILL = "will"
T = PacketType
_PUB = (T.PUBLISH, WILL)
_ACKS = (T.PUBACK, T.PUBREC, T.PUBREL, T.PUBCOMP)
_REASON_STRING = (T.CONNACK, *_ACKS, T.SUBACK, T.UNSUBACK, T.DISCONNECT, T.AUTH)
_EVERY: tuple[PacketType | str, ...] = (T.CONNECT, T.CONNACK, T.PUBLISH, WILL, *_ACKS, T.SUBSCRIBE)
_EVERY += (T.SUBACK, T.UNSUBSCRIBE, T.UNSUBACK, T.DISCONNECT, T.AUTH)


@dataclass(frozen=True, slots=True)
class Spec:
    identifier: int
    name: str
    kind: Kind
    packets: frozenset[PacketType | str]
    #: 0/1 only (a Protocol Error otherwise).
    flag: bool = False
    #: 0 is a Protocol Error.
    nonzero: bool = False


def _spec(
    identifier: int, name: str, kind: Kind, packets: tuple[PacketType | str, ...], **rules: bool
) -> Spec:
    return Spec(identifier, name, kind, frozenset(packets), **rules)


SPECS: tuple[Spec, ...] = (
    _spec(0x01, "payload_format_indicator", Kind.BYTE, _PUB, flag=True),
    _spec(0x02, "message_expiry_interval", Kind.U32, _PUB),
    _spec(0x03, "content_type", Kind.UTF8, _PUB),
    _spec(0x08, "response_topic", Kind.UTF8, _PUB),
    _spec(0x09, "correlation_data", Kind.BINARY, _PUB),
    _spec(0x0B, "subscription_identifiers", Kind.VARINT, (T.PUBLISH, T.SUBSCRIBE), nonzero=True),
    _spec(0x11, "session_expiry_interval", Kind.U32, (T.CONNECT, T.CONNACK, T.DISCONNECT)),
    _spec(0x12, "assigned_client_identifier", Kind.UTF8, (T.CONNACK,)),
    _spec(0x13, "server_keep_alive", Kind.U16, (T.CONNACK,)),
    _spec(0x15, "authentication_method", Kind.UTF8, (T.CONNECT, T.CONNACK, T.AUTH)),
    _spec(0x16, "authentication_data", Kind.BINARY, (T.CONNECT, T.CONNACK, T.AUTH)),
    _spec(0x17, "request_problem_information", Kind.BYTE, (T.CONNECT,), flag=True),
    _spec(0x18, "will_delay_interval", Kind.U32, (WILL,)),
    _spec(0x19, "request_response_information", Kind.BYTE, (T.CONNECT,), flag=True),
    _spec(0x1A, "response_information", Kind.UTF8, (T.CONNACK,)),
    _spec(0x1C, "server_reference", Kind.UTF8, (T.CONNACK, T.DISCONNECT)),
    _spec(0x1F, "reason_string", Kind.UTF8, _REASON_STRING),
    _spec(0x21, "receive_maximum", Kind.U16, (T.CONNECT, T.CONNACK), nonzero=True),
    _spec(0x22, "topic_alias_maximum", Kind.U16, (T.CONNECT, T.CONNACK)),
    _spec(0x23, "topic_alias", Kind.U16, (T.PUBLISH,), nonzero=True),
    _spec(0x24, "maximum_qos", Kind.BYTE, (T.CONNACK,), flag=True),
    _spec(0x25, "retain_available", Kind.BYTE, (T.CONNACK,), flag=True),
    _spec(0x26, "user_properties", Kind.PAIR, _EVERY),
    _spec(0x27, "maximum_packet_size", Kind.U32, (T.CONNECT, T.CONNACK), nonzero=True),
    _spec(0x28, "wildcard_subscription_available", Kind.BYTE, (T.CONNACK,), flag=True),
    _spec(0x29, "subscription_identifier_available", Kind.BYTE, (T.CONNACK,), flag=True),
    _spec(0x2A, "shared_subscription_available", Kind.BYTE, (T.CONNACK,), flag=True),
)
BY_ID = {spec.identifier: spec for spec in SPECS}
BY_NAME = {spec.name: spec for spec in SPECS}
#: The properties that may be given more than once: kept as tuples, in the order they came.
REPEATED = frozenset(("user_properties", "subscription_identifiers"))


@dataclass(frozen=True, slots=True)
class Properties:
    """A packet's MQTT 5 properties; None (or an empty tuple) is a property not given."""

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = ()
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None

    def given(self) -> list[tuple[Spec, Any]]:
        """The properties set, in identifier order."""
        out = []
        for spec in SPECS:
            value = getattr(self, spec.name)
            if value is not None and value != ():
                out.append((spec, value))
        return out

    def replace(self, **changes: Any) -> Properties:
        return dataclasses.replace(self, **changes)


NONE = Properties()


def decode(reader: p.Reader, packet: PacketType | str) -> Properties:
    """The Property Length and the properties after it, as allowed in ``packet``."""
    length = reader.varint("property length")
    if length == 0:
        return NONE
    end = reader.pos + length
    if end > reader.end:
        raise malformed("the property length runs past the end of the packet")
    inner = p.Reader(reader.data, reader.pos, end)
    reader.pos = end
    values: dict[str, Any] = {}
    while inner.remaining:
        identifier = inner.varint("property identifier")
        spec = BY_ID.get(identifier)
        if spec is None:
            raise malformed(f"unknown property identifier 0x{identifier:02x}")
        if packet not in spec.packets:
            raise malformed(f"property {spec.name} is not valid in {_name(packet)}")
        value = _read(inner, spec)
        if spec.name in REPEATED:
            if spec.name == "subscription_identifiers" and packet != T.PUBLISH and spec.name in values:
                raise protocol_error("more than one subscription identifier")
            values[spec.name] = (*values.get(spec.name, ()), value)
        elif spec.name in values:
            raise protocol_error(f"property {spec.name} given twice")
        else:
            values[spec.name] = value
    return Properties(**values)


def _read(reader: p.Reader, spec: Spec) -> Any:
    kind, name = spec.kind, spec.name
    value: Any
    if kind is Kind.BYTE:
        value = reader.byte(name)
    elif kind is Kind.U16:
        value = reader.u16(name)
    elif kind is Kind.U32:
        value = reader.u32(name)
    elif kind is Kind.VARINT:
        value = reader.varint(name)
    elif kind is Kind.UTF8:
        value = reader.utf8(name)
    elif kind is Kind.BINARY:
        value = reader.binary(name)
    else:
        value = (reader.utf8(name), reader.utf8(name))
    if spec.flag and value not in (0, 1):
        raise protocol_error(f"property {name} is {value}, not 0 or 1")
    if spec.nonzero and value == 0:
        raise protocol_error(f"property {name} is 0")
    return value


def encode(properties: Properties, packet: PacketType | str) -> bytes:
    """The Property Length and the properties; ValueError for one not valid in ``packet``."""
    if properties is NONE:
        return b"\x00"
    parts: list[bytes] = []
    for spec, value in properties.given():
        if packet not in spec.packets:
            raise ValueError(f"property {spec.name} is not valid in {_name(packet)}")
        for one in value if spec.name in REPEATED else (value,):
            parts.append(p.varint(spec.identifier))
            parts.append(_write(spec.kind, one))
    body = b"".join(parts)
    return p.varint(len(body)) + body


def _write(kind: Kind, value: Any) -> bytes:
    if kind is Kind.BYTE:
        return bytes((value,))
    if kind is Kind.U16:
        return p.u16(value)
    if kind is Kind.U32:
        return p.u32(value)
    if kind is Kind.VARINT:
        return p.varint(value)
    if kind is Kind.UTF8:
        return p.utf8(value)
    if kind is Kind.BINARY:
        return p.binary(value)
    key, text = value
    return p.utf8(key) + p.utf8(text)


def _name(packet: PacketType | str) -> str:
    return packet.name if isinstance(packet, PacketType) else "Will Properties"
