"""The MQTT codec's rules, byte by byte: what each standard refuses and with which reason code."""

from __future__ import annotations

import pytest

from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    MQTT_5,
    Connect,
    Disconnect,
    MqttDecoder,
    MqttError,
    Properties,
    PubAck,
    Publish,
    ReasonCode,
    Subscribe,
    Subscription,
    UnsupportedProtocolVersion,
    encode,
)
from magnetar.protocol.mqtt.topics import check_topic_filter, matches, shared_filter

R = ReasonCode


def read(data: bytes, version: int | None = MQTT_5, max_packet_size: int = 1 << 20):
    decoder = MqttDecoder(max_packet_size, version)
    decoder.feed(data)
    return decoder.next_packet()


def refused(data: bytes, version: int | None = MQTT_5, max_packet_size: int = 1 << 20) -> MqttError:
    with pytest.raises(MqttError) as caught:
        read(data, version, max_packet_size)
    return caught.value


def connect_bytes(
    level: int = 4, flags: int = 0x02, name: bytes = b"MQTT", tail: bytes = b"\x00\x00"
) -> bytes:
    body = len(name).to_bytes(2, "big") + name + bytes((level, flags)) + b"\x00\x3c"
    body += (b"\x00" if level == 5 else b"") + tail
    return bytes((0x10, len(body))) + body


def test_connect_of_each_version_is_read_and_sets_the_decoders_version():
    decoder = MqttDecoder()
    decoder.feed(connect_bytes(4))
    packet = decoder.next_packet()
    assert packet == Connect("", 4, True, 60)
    assert decoder.version == MQTT_3_1_1
    assert read(connect_bytes(5), None) == Connect("", 5, True, 60)


@pytest.mark.parametrize(("name", "level"), [(b"MQTT", 3), (b"MQIsdp", 3), (b"MQTT", 6), (b"MQTX", 4)])
def test_a_protocol_we_do_not_speak_is_unsupported_protocol_version(name, level):
    error = refused(connect_bytes(level, name=name), None)
    assert isinstance(error, UnsupportedProtocolVersion)
    assert error.reason == R.UNSUPPORTED_PROTOCOL_VERSION


@pytest.mark.parametrize(
    ("flags", "level", "why"),
    [
        (0x03, 4, "reserved connect flag"),
        (0x1A, 5, "Will QoS 3"),
        (0x22, 4, "Will Retain without a Will"),
        (0x08, 5, "Will QoS without a Will"),
        (0x42, 4, "a password without a user name (3.1.1)"),
    ],
)
def test_bad_connect_flags_are_malformed_and_carry_the_level(flags, level, why):
    error = refused(connect_bytes(level, flags), None)
    assert error.reason == R.MALFORMED_PACKET, why
    assert error.version == level


def test_a_password_without_a_user_name_is_allowed_in_5():
    tail = b"\x00\x00" + b"\x00\x02pw"
    assert read(connect_bytes(5, 0x42, tail=tail), None).password == b"pw"


def test_packets_before_connect_are_protocol_errors():
    assert refused(encode(Publish("a", b"x"), MQTT_5), None).reason == R.PROTOCOL_ERROR


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00\x00", R.MALFORMED_PACKET),  # reserved type 0
        (b"\xf0\x00", R.MALFORMED_PACKET),  # AUTH in 3.1.1 (read below as 3.1.1)
        (b"\x36\x05\x00\x01a\x00\x01", R.MALFORMED_PACKET),  # PUBLISH QoS 3
        (b"\x38\x03\x00\x01a", R.MALFORMED_PACKET),  # DUP with QoS 0
        (b"\x32\x05\x00\x01a\x00\x00", R.MALFORMED_PACKET),  # packet identifier 0
        (b"\x30\x03\x00\x01+", R.TOPIC_NAME_INVALID),  # a wildcard in a Topic Name
        (b"\x30\x04\x00\x02a#", R.TOPIC_NAME_INVALID),
        (b"\x30\x02\x00\x00", R.PROTOCOL_ERROR),  # an empty Topic Name
        (b"\x30\x03\x00\x01\x00", R.MALFORMED_PACKET),  # U+0000
        (b"\x30\x04\x00\x02\xc3\x28", R.MALFORMED_PACKET),  # not UTF-8
        (b"\x30\x05\x00\x03\xed\xa0\x80", R.MALFORMED_PACKET),  # a UTF-16 surrogate, as UTF-8
        (b"\x30\x05\x00\x09abc", R.MALFORMED_PACKET),  # a string longer than its packet
        (b"\x40\x03\x00\x01\x00", R.MALFORMED_PACKET),  # PUBACK of 3 bytes in 3.1.1
        (b"\x60\x02\x00\x01", R.MALFORMED_PACKET),  # PUBREL without its 0010 flags
        (b"\x82\x02\x00\x01", R.PROTOCOL_ERROR),  # SUBSCRIBE without a filter
        (b"\x82\x06\x00\x01\x00\x01a\x04", R.MALFORMED_PACKET),  # reserved option bits in 3.1.1
        (b"\x82\x06\x00\x01\x00\x01a\x03", R.MALFORMED_PACKET),  # subscription QoS 3
        (b"\x82\x07\x00\x01\x00\x02a#\x00", R.MALFORMED_PACKET),  # '#' inside a level
        (b"\xa2\x02\x00\x01", R.PROTOCOL_ERROR),  # UNSUBSCRIBE without a filter
        (b"\xc0\x01\x00", R.MALFORMED_PACKET),  # PINGREQ with a body
        (b"\xe0\x01\x00", R.MALFORMED_PACKET),  # DISCONNECT with a body in 3.1.1
        (b"\x30\x80\x00", R.MALFORMED_PACKET),  # Remaining Length not in its fewest bytes
        (b"\x30\xff\xff\xff\xff\x01", R.MALFORMED_PACKET),  # a fifth length byte
    ],
)
def test_3_1_1_refusals(data, reason):
    assert refused(data, MQTT_3_1_1).reason == reason


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x30\x05\x00\x01a\x01\xff", R.MALFORMED_PACKET),  # unknown property 0xff
        (b"\x30\x06\x00\x01a\x02\x11\x00", R.MALFORMED_PACKET),  # Session Expiry in a PUBLISH
        (b"\x30\x08\x00\x01a\x04\x01\x00\x01\x00", R.PROTOCOL_ERROR),  # a property twice
        (b"\x30\x06\x00\x01a\x02\x01\x02", R.PROTOCOL_ERROR),  # Payload Format Indicator 2
        (b"\x30\x07\x00\x01a\x03\x23\x00\x00", R.PROTOCOL_ERROR),  # Topic Alias 0
        (b"\x30\x06\x00\x01a\x09\x01\x00", R.MALFORMED_PACKET),  # property length past the end
        (b"\x40\x03\x00\x01\x05", R.MALFORMED_PACKET),  # a reason code PUBACK may not carry
        (b"\xe0\x01\x05", R.MALFORMED_PACKET),  # nor DISCONNECT
        (b"\x82\x06\x00\x01\x00\x00\x01a", R.MALFORMED_PACKET),  # truncated options
        (b"\x82\x07\x00\x01\x00\x00\x01a\x30", R.MALFORMED_PACKET),  # Retain Handling 3
        (b"\x82\x0b\x00\x01\x04\x0b\x01\x0b\x02\x00\x01a\x00", R.PROTOCOL_ERROR),  # two subscription ids
        (b"\x82\x0f\x00\x01\x00\x00\x09$share/g/\x00", R.PROTOCOL_ERROR),  # $share without a filter
    ],
)
def test_5_refusals(data, reason):
    assert refused(data, MQTT_5).reason == reason


def test_an_empty_topic_name_with_a_topic_alias_is_read_in_5():
    packet = read(b"\x30\x06\x00\x00\x03\x23\x00\x07")
    assert packet == Publish("", b"", properties=Properties(topic_alias=7))


def test_a_leading_bom_is_kept():
    assert read(encode(Publish("\ufeffa", b"x"), MQTT_5)).topic == "\ufeffa"


def test_a_packet_over_the_maximum_is_refused_from_its_length_alone():
    header = b"\x30\xff\xff\x03"  # announces 65535 bytes; none of them has come
    error = refused(header, MQTT_5, max_packet_size=1024)
    assert error.reason == R.PACKET_TOO_LARGE


def test_the_maximum_counts_the_whole_packet():
    packet = encode(Publish("t", b"x" * 10), MQTT_5)
    assert read(packet, MQTT_5, max_packet_size=len(packet)) is not None
    assert refused(packet, MQTT_5, max_packet_size=len(packet) - 1).reason == R.PACKET_TOO_LARGE


def test_bytes_arriving_one_at_a_time():
    packet = Publish(
        "a/b", b"payload" * 100, 1, packet_id=9, properties=Properties(user_properties=(("k", "v"),))
    )
    decoder = MqttDecoder(version=MQTT_5)
    data = encode(packet, MQTT_5)
    for index in range(len(data) - 1):
        decoder.feed(data[index : index + 1])
        assert decoder.next_packet() is None
    decoder.feed(data[-1:])
    assert decoder.next_packet() == packet


def test_acks_of_5_are_written_in_their_shortest_form():
    assert encode(PubAck(1), MQTT_5) == b"\x40\x02\x00\x01"
    assert encode(PubAck(1, 0x10), MQTT_5) == b"\x40\x03\x00\x01\x10"
    assert encode(Disconnect(), MQTT_5) == b"\xe0\x00"
    assert encode(Disconnect(0x8E), MQTT_5) == b"\xe0\x02\x8e\x00"


def test_3_1_1_cannot_carry_what_it_lacks():
    with pytest.raises(ValueError):
        encode(PubAck(1, 0x80), MQTT_3_1_1)
    with pytest.raises(ValueError):
        encode(Publish("a", properties=Properties(content_type="x")), MQTT_3_1_1)
    with pytest.raises(ValueError):
        encode(Subscribe(1, (Subscription("a", no_local=True),)), MQTT_3_1_1)


@pytest.mark.parametrize(
    ("topic_filter", "name", "expected"),
    [
        ("sport/tennis/#", "sport/tennis", True),
        ("sport/tennis/#", "sport/tennis/player1/ranking", True),
        ("sport/#", "sport", True),
        ("#", "anything/at/all", True),
        ("sport/+", "sport/", True),
        ("sport/+", "sport", False),
        ("sport/+/player1", "sport/tennis/player1", True),
        ("+/+", "/finance", True),
        ("+", "/finance", False),
        ("#", "$SYS/broker", False),
        ("+/monitor", "$SYS/monitor", False),
        ("$SYS/#", "$SYS/broker", True),
        ("a/b", "a/b", True),
        ("a/b", "a/c", False),
    ],
)
def test_topic_filters_match_as_the_standard_says(topic_filter, name, expected):
    assert matches(topic_filter, name) is expected


@pytest.mark.parametrize("bad", ["", "a/#/b", "a#", "a/b+", "+a", "$share/g", "$share//a", "$share/g+/a"])
def test_bad_topic_filters(bad):
    with pytest.raises(MqttError):
        check_topic_filter(bad)


def test_shared_filters():
    parsed = shared_filter("$share/group/a/+/c")
    assert parsed is not None
    assert (parsed.share_name, parsed.topic_filter) == ("group", "a/+/c")
    assert shared_filter("a/b") is None
