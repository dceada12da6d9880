"""One packet's bytes to a packet value and back, for MQTT 3.1.1 and 5.0 (section 3 of each).

``decode(first_byte, body, version)`` reads one packet whose fixed header the stream decoder
(``decoder.py``) has split off; ``encode(packet, version)`` writes one whole packet. Every rule a
packet's bytes alone can break is checked here and raised as ``MqttError`` with the reason code
the standard gives (Malformed Packet unless it says Protocol Error or Topic Name invalid); rules
about the session (a second CONNECT, a PUBLISH before CONNECT, packet identifiers in use) are the
broker's.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.protocol.mqtt import primitives as p
from magnetar.protocol.mqtt import properties as props
from magnetar.protocol.mqtt.codes import ALLOWED_REASONS, MQTT_3_1_1, MQTT_5, VERSIONS, PacketType
from magnetar.protocol.mqtt.errors import MqttError, UnsupportedProtocolVersion, malformed, protocol_error
from magnetar.protocol.mqtt.packets import (
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PublishAck,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from magnetar.protocol.mqtt.topics import check_topic_filter, check_topic_name

T = PacketType
#: The flags of the fixed header's first byte that each type but PUBLISH must carry (2.1.3).
REQUIRED_FLAGS = {T.PUBREL: 0b0010, T.SUBSCRIBE: 0b0010, T.UNSUBSCRIBE: 0b0010}
_ACK_TYPES: dict[PacketType, type[PublishAck]] = {
    T.PUBACK: PubAck,
    T.PUBREC: PubRec,
    T.PUBREL: PubRel,
    T.PUBCOMP: PubComp,
}
_CONNECT_RESERVED = 0x01
_PUBLISH = int(T.PUBLISH)
_PING_REQ, _PING_RESP = PingReq(), PingResp()


# -- decoding ---------------------------------------------------------------------------------
def decode(first_byte: int, body: bytes, version: int | None) -> Packet:
    """The packet of type and flags ``first_byte`` whose Remaining Length bytes are ``body``.
    ``version`` is the connection's protocol level (None before its CONNECT: only a CONNECT, which
    says its own, can be read then)."""
    kind = first_byte >> 4
    flags = first_byte & 0x0F
    if kind == _PUBLISH and version in VERSIONS:  # most packets: straight to it
        return _publish(flags, body, version)
    if kind == 0 or (kind == T.AUTH and version != MQTT_5):
        raise malformed(f"reserved packet type {kind}")
    packet_type = PacketType(kind)
    if packet_type is T.CONNECT:
        if flags:
            raise malformed("CONNECT with flags set")
        return _connect(body)
    if version not in VERSIONS:
        raise protocol_error(f"{packet_type.name} before CONNECT")
    if packet_type is T.PUBLISH:
        return _publish(flags, body, version)
    if flags != REQUIRED_FLAGS.get(packet_type, 0):
        raise malformed(f"{packet_type.name} with flags {flags:04b}")
    reader = p.Reader(body)
    packet = _READERS[packet_type](reader, version)
    if reader.remaining:
        raise malformed(f"{reader.remaining} bytes after the end of a {packet_type.name}")
    return packet


def _connect(body: bytes) -> Connect:
    reader = p.Reader(body)
    name = reader.utf8("protocol name")
    level = reader.byte("protocol level")
    if name != "MQTT" or level not in VERSIONS:
        raise UnsupportedProtocolVersion(name, level)
    try:
        return _connect_rest(reader, level)
    except MqttError as exc:
        exc.version = level
        raise


def _connect_rest(reader: p.Reader, level: int) -> Connect:
    flags = reader.byte("connect flags")
    if flags & _CONNECT_RESERVED:
        raise malformed("the reserved connect flag is set")
    has_username, has_password = bool(flags & 0x80), bool(flags & 0x40)
    will_retain, will_qos, has_will = bool(flags & 0x20), (flags >> 3) & 0x03, bool(flags & 0x04)
    if will_qos == 3:
        raise malformed("Will QoS 3")
    if not has_will and (will_qos or will_retain):
        raise malformed("Will QoS or Will Retain without a Will")
    if level == MQTT_3_1_1 and has_password and not has_username:
        raise malformed("a password without a user name")
    keep_alive = reader.u16("keep alive")
    properties = props.decode(reader, T.CONNECT) if level == MQTT_5 else props.NONE
    client_id = reader.utf8("client identifier")
    will = None
    if has_will:
        will_properties = props.decode(reader, props.WILL) if level == MQTT_5 else props.NONE
        will_topic = reader.utf8("will topic")
        check_topic_name(will_topic)
        will = Will(will_topic, reader.binary("will payload"), will_qos, will_retain, will_properties)
    username = reader.utf8("user name") if has_username else None
    password = reader.binary("password") if has_password else None
    if reader.remaining:
        raise malformed(f"{reader.remaining} bytes after the end of a CONNECT")
    return Connect(client_id, level, bool(flags & 0x02), keep_alive, username, password, will, properties)


#: Topic Names read and found valid, by their bytes: a client publishes to the same few again and
#: again. Names of at most ``_TOPIC_NAME_KEPT_MAX`` bytes, forgotten together past
#: ``_TOPIC_NAMES_MAX``.
_TOPIC_NAMES: dict[bytes, str] = {}
_TOPIC_NAMES_MAX = 4096
_TOPIC_NAME_KEPT_MAX = 512


def _publish(flags: int, body: bytes, version: int) -> Publish:
    qos = (flags >> 1) & 0x03
    if qos == 3:
        raise malformed("PUBLISH with QoS 3")
    dup = bool(flags & 0x08)
    if dup and not qos:
        raise malformed("PUBLISH with QoS 0 and DUP set")
    size = len(body)
    if size < 2:
        raise malformed("topic name runs past the end of the packet")
    pos = 2 + (body[0] << 8 | body[1])
    if pos > size:
        raise malformed("topic name runs past the end of the packet")
    raw_topic = body[2:pos]
    topic = _TOPIC_NAMES.get(raw_topic)
    checked = topic is not None
    if topic is None:
        topic = p.decode_utf8(raw_topic, "topic name")
    packet_id = None
    if qos:
        if pos + 2 > size:
            raise malformed("packet identifier runs past the end of the packet")
        packet_id = body[pos] << 8 | body[pos + 1]
        pos += 2
        if not packet_id:
            raise malformed("packet identifier 0")
    properties = props.NONE
    if version == MQTT_5:
        reader = p.Reader(body, pos)
        properties = props.decode(reader, T.PUBLISH)
        pos = reader.pos
    if not checked and (topic or properties.topic_alias is None):  # 5.0: empty with a Topic Alias
        check_topic_name(topic)
        if len(raw_topic) <= _TOPIC_NAME_KEPT_MAX:
            if len(_TOPIC_NAMES) >= _TOPIC_NAMES_MAX:
                _TOPIC_NAMES.clear()
            _TOPIC_NAMES[raw_topic] = topic
    return Publish(topic, body[pos:], qos, bool(flags & 0x01), dup, packet_id, properties)


def _reason(reader: p.Reader, packet_type: PacketType) -> int:
    code = reader.byte("reason code")
    if code not in ALLOWED_REASONS[packet_type]:
        raise malformed(f"reason code 0x{code:02x} is not one a {packet_type.name} may carry")
    return code


def _packet_id(reader: p.Reader) -> int:
    packet_id = reader.u16("packet identifier")
    if not packet_id:
        raise malformed("packet identifier 0")
    return packet_id


def _publish_ack(packet_type: PacketType) -> Callable[[p.Reader, int], PublishAck]:
    make = _ACK_TYPES[packet_type]

    def read(reader: p.Reader, version: int) -> PublishAck:
        packet_id = _packet_id(reader)
        if version != MQTT_5 or not reader.remaining:
            return make(packet_id)
        code = _reason(reader, packet_type)
        properties = props.decode(reader, packet_type) if reader.remaining else props.NONE
        return make(packet_id, code, properties)

    return read


def _connack(reader: p.Reader, version: int) -> ConnAck:
    flags = reader.byte("connect acknowledge flags")
    if flags & 0xFE:
        raise malformed("reserved CONNACK flags set")
    if version == MQTT_3_1_1:
        code = reader.byte("return code")
        if code > 5:
            raise malformed(f"CONNACK return code {code}")
        return ConnAck(bool(flags), code)
    code = _reason(reader, T.CONNACK)
    return ConnAck(bool(flags), code, props.decode(reader, T.CONNACK))


def _subscribe(reader: p.Reader, version: int) -> Subscribe:
    packet_id = _packet_id(reader)
    properties = props.decode(reader, T.SUBSCRIBE) if version == MQTT_5 else props.NONE
    subscriptions = []
    while reader.remaining:
        topic_filter = reader.utf8("topic filter")
        check_topic_filter(topic_filter)
        options = reader.byte("subscription options")
        qos = options & 0x03
        if qos == 3:
            raise malformed("a subscription with QoS 3")
        if version == MQTT_3_1_1:
            if options & 0xFC:
                raise malformed("reserved subscription option bits set")
            subscriptions.append(Subscription(topic_filter, qos))
            continue
        retain_handling = (options >> 4) & 0x03
        if options & 0xC0 or retain_handling == 3:
            raise malformed("reserved subscription option bits set")
        subscriptions.append(
            Subscription(topic_filter, qos, bool(options & 0x04), bool(options & 0x08), retain_handling)
        )
    if not subscriptions:
        raise protocol_error("SUBSCRIBE without a topic filter")
    return Subscribe(packet_id, tuple(subscriptions), properties)


def _suback(reader: p.Reader, version: int) -> SubAck:
    packet_id = _packet_id(reader)
    properties = props.decode(reader, T.SUBACK) if version == MQTT_5 else props.NONE
    codes = []
    while reader.remaining:
        code = reader.byte("return code")
        valid = ALLOWED_REASONS[T.SUBACK] if version == MQTT_5 else (0, 1, 2, 0x80)
        if code not in valid:
            raise malformed(f"SUBACK code 0x{code:02x}")
        codes.append(code)
    return SubAck(packet_id, tuple(codes), properties)


def _unsubscribe(reader: p.Reader, version: int) -> Unsubscribe:
    packet_id = _packet_id(reader)
    properties = props.decode(reader, T.UNSUBSCRIBE) if version == MQTT_5 else props.NONE
    filters = []
    while reader.remaining:
        topic_filter = reader.utf8("topic filter")
        check_topic_filter(topic_filter)
        filters.append(topic_filter)
    if not filters:
        raise protocol_error("UNSUBSCRIBE without a topic filter")
    return Unsubscribe(packet_id, tuple(filters), properties)


def _unsuback(reader: p.Reader, version: int) -> UnsubAck:
    packet_id = _packet_id(reader)
    if version != MQTT_5:
        return UnsubAck(packet_id)
    properties = props.decode(reader, T.UNSUBACK)
    codes = []
    while reader.remaining:
        codes.append(_reason(reader, T.UNSUBACK))
    return UnsubAck(packet_id, tuple(codes), properties)


def _empty(packet: PingReq | PingResp) -> Callable[[p.Reader, int], Packet]:
    def read(reader: p.Reader, version: int) -> Packet:
        return packet  # Remaining Length must be 0: checked by ``decode``

    return read


def _disconnect(reader: p.Reader, version: int) -> Disconnect:
    if version != MQTT_5 or not reader.remaining:
        return Disconnect()
    code = _reason(reader, T.DISCONNECT)
    return Disconnect(code, props.decode(reader, T.DISCONNECT) if reader.remaining else props.NONE)


def _auth(reader: p.Reader, version: int) -> Auth:
    if not reader.remaining:
        return Auth()
    code = _reason(reader, T.AUTH)
    return Auth(code, props.decode(reader, T.AUTH))


_READERS: dict[PacketType, Callable[[p.Reader, int], Packet]] = {
    T.CONNACK: _connack,
    T.PUBACK: _publish_ack(T.PUBACK),
    T.PUBREC: _publish_ack(T.PUBREC),
    T.PUBREL: _publish_ack(T.PUBREL),
    T.PUBCOMP: _publish_ack(T.PUBCOMP),
    T.SUBSCRIBE: _subscribe,
    T.SUBACK: _suback,
    T.UNSUBSCRIBE: _unsubscribe,
    T.UNSUBACK: _unsuback,
    T.PINGREQ: _empty(_PING_REQ),
    T.PINGRESP: _empty(_PING_RESP),
    T.DISCONNECT: _disconnect,
    T.AUTH: _auth,
}


# -- encoding ---------------------------------------------------------------------------------
def encode(packet: Packet, version: int) -> bytes:
    """The whole packet, fixed header first; ValueError for a packet ``version`` cannot carry (a
    property or reason code in 3.1.1, an AUTH in 3.1.1, a value out of its range)."""
    if isinstance(packet, Publish):
        return _encode_publish(packet, version)
    first, body = _body(packet, version)
    return bytes((first,)) + p.varint(len(body)) + body


def _encode_publish(packet: Publish, version: int) -> bytes:
    qos = packet.qos
    if qos not in (0, 1, 2):
        raise ValueError(f"QoS {qos}")
    if (packet.packet_id is None) != (qos == 0):
        raise ValueError("a packet identifier goes with QoS 1 and 2, and only with them")
    first = 0x30 | (0x08 if packet.dup else 0) | (qos << 1) | (1 if packet.retain else 0)
    head = p.utf8(packet.topic)
    if packet.packet_id is not None:
        head += p.u16(packet.packet_id)
    if version == MQTT_5:
        head += props.encode(packet.properties, T.PUBLISH)
    else:
        _no_properties(packet.properties, version)
    size = len(head) + len(packet.payload)
    return b"".join((bytes((first,)), p.varint(size), head, packet.payload))


def _no_properties(properties: props.Properties, version: int) -> None:
    if properties is not props.NONE and properties != props.NONE:  # a dataclass's == compares every field
        raise ValueError(f"MQTT protocol level {version} has no properties")


def _no_reason(code: int, version: int) -> None:
    if code:
        raise ValueError(f"MQTT protocol level {version} has no reason code here")


def _body(packet: Packet, version: int) -> tuple[int, bytes]:
    v5 = version == MQTT_5
    if isinstance(packet, (PubAck, PubRec, PubRel, PubComp)):
        first = packet.type << 4 | REQUIRED_FLAGS.get(packet.type, 0)
        body = p.u16(packet.packet_id)
        if not v5:
            _no_reason(packet.reason_code, version)
            _no_properties(packet.properties, version)
        elif packet.properties != props.NONE:
            body += bytes((packet.reason_code,)) + props.encode(packet.properties, packet.type)
        elif packet.reason_code:
            body += bytes((packet.reason_code,))
        return first, body
    if isinstance(packet, Connect):
        return 0x10, _encode_connect(packet)
    if isinstance(packet, ConnAck):
        body = bytes((int(packet.session_present), packet.reason_code))
        if v5:
            body += props.encode(packet.properties, T.CONNACK)
        else:
            _no_properties(packet.properties, version)
        return 0x20, body
    if isinstance(packet, Subscribe):
        parts = [p.u16(packet.packet_id), _properties_for(packet.properties, T.SUBSCRIBE, version)]
        for sub in packet.subscriptions:
            options = sub.qos | sub.no_local << 2 | sub.retain_as_published << 3 | sub.retain_handling << 4
            if not v5 and options & 0xFC:
                raise ValueError("MQTT 3.1.1 has no subscription options but QoS")
            parts += (p.utf8(sub.topic_filter), bytes((options,)))
        return 0x82, b"".join(parts)
    if isinstance(packet, SubAck):
        head = p.u16(packet.packet_id) + _properties_for(packet.properties, T.SUBACK, version)
        return 0x90, head + bytes(packet.reason_codes)
    if isinstance(packet, Unsubscribe):
        parts = [p.u16(packet.packet_id), _properties_for(packet.properties, T.UNSUBSCRIBE, version)]
        parts += [p.utf8(topic_filter) for topic_filter in packet.topic_filters]
        return 0xA2, b"".join(parts)
    if isinstance(packet, UnsubAck):
        head = p.u16(packet.packet_id) + _properties_for(packet.properties, T.UNSUBACK, version)
        if not v5 and packet.reason_codes:
            raise ValueError("MQTT 3.1.1's UNSUBACK has no reason codes")
        return 0xB0, head + bytes(packet.reason_codes)
    if isinstance(packet, PingReq):
        return 0xC0, b""
    if isinstance(packet, PingResp):
        return 0xD0, b""
    if isinstance(packet, (Disconnect, Auth)):
        if isinstance(packet, Auth) and not v5:
            raise ValueError("AUTH is MQTT 5 only")
        if not v5:
            _no_reason(packet.reason_code, version)
            _no_properties(packet.properties, version)
            return 0xE0, b""
        if packet.reason_code == 0 and packet.properties == props.NONE:
            return packet.type << 4, b""
        return packet.type << 4, bytes((packet.reason_code,)) + props.encode(packet.properties, packet.type)
    raise TypeError(f"not an MQTT packet: {packet!r}")


def _properties_for(properties: props.Properties, packet_type: PacketType, version: int) -> bytes:
    if version == MQTT_5:
        return props.encode(properties, packet_type)
    _no_properties(properties, version)
    return b""


def _encode_connect(packet: Connect) -> bytes:
    level = packet.protocol_level
    v5 = level == MQTT_5
    will = packet.will
    flags = (0x80 if packet.username is not None else 0) | (0x40 if packet.password is not None else 0)
    flags |= 0x02 if packet.clean_start else 0
    if will is not None:
        flags |= 0x04 | will.qos << 3 | (0x20 if will.retain else 0)
    parts = [p.utf8("MQTT"), bytes((level, flags)), p.u16(packet.keep_alive)]
    parts.append(_properties_for(packet.properties, T.CONNECT, level))
    parts.append(p.utf8(packet.client_id))
    if will is not None:
        if v5:
            parts.append(props.encode(will.properties, props.WILL))
        else:
            _no_properties(will.properties, level)
        parts += (p.utf8(will.topic), p.binary(will.payload))
    if packet.username is not None:
        parts.append(p.utf8(packet.username))
    if packet.password is not None:
        parts.append(p.binary(packet.password))
    return b"".join(parts)
