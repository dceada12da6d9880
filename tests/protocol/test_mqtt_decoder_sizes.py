"""What the MQTT decoder says of a packet before it is whole: its declared size (the broker sets
memory aside for a large one) and, for a CONNECT too large, the version to refuse it in."""

from __future__ import annotations

import pytest

from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    MQTT_5,
    MqttDecoder,
    MqttError,
    PubAck,
    Publish,
    ReasonCode,
    encode,
)
from magnetar.protocol.mqtt.primitives import varint


def test_pending_size_is_the_declared_size_while_the_packet_arrives():
    packet = encode(Publish("t", b"x" * 1000), MQTT_5)
    decoder = MqttDecoder(version=MQTT_5)
    assert decoder.pending_size == 0
    decoder.feed(packet[:1])
    assert decoder.pending_size == 0  # its length not read yet
    decoder.feed(packet[1:10])
    assert decoder.pending_size == len(packet)
    decoder.feed(packet[10:] + packet[:5])
    assert decoder.pending_size == 0  # whole: no longer pending (the next one's length is)
    assert decoder.next_packet() == Publish("t", b"x" * 1000)
    assert decoder.pending_size == len(packet)


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_a_connect_too_large_is_refused_in_its_own_version(level):
    decoder = MqttDecoder(max_packet_size=1024)
    decoder.feed(b"\x10" + varint(5000) + b"\x00\x04MQTT" + bytes([level]))
    with pytest.raises(MqttError) as refused:
        decoder.next_packet()
    assert refused.value.reason == ReasonCode.PACKET_TOO_LARGE and refused.value.version == level


def test_a_connect_too_large_whose_level_has_not_come_names_none():
    decoder = MqttDecoder(max_packet_size=1024)
    decoder.feed(b"\x10" + varint(5000) + b"\x00\x04MQ")
    with pytest.raises(MqttError) as refused:
        decoder.next_packet()
    assert refused.value.version is None


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_a_puback_of_success_is_read_as_any_other_packet(level):
    """The decoder reads the common PUBACK (type, length 2, identifier) itself: the same packet as
    the codec's, split anywhere, identifier 0 still malformed, longer 5.0 ones through the codec."""
    ok = encode(PubAck(0x1234), level)
    decoder = MqttDecoder(version=level)
    decoder.feed(ok[:3])
    assert decoder.next_packet() is None
    decoder.feed(ok[3:] + ok)
    assert decoder.next_packet() == PubAck(0x1234) == decoder.next_packet()
    assert decoder.next_packet() is None
    decoder.feed(b"\x40\x02\x00\x00")
    with pytest.raises(MqttError, match="packet identifier 0"):
        decoder.next_packet()
    if level == MQTT_5:
        refused = MqttDecoder(version=level)
        refused.feed(encode(PubAck(7, ReasonCode.QUOTA_EXCEEDED), level))
        assert refused.next_packet() == PubAck(7, ReasonCode.QUOTA_EXCEEDED)


def test_a_puback_before_connect_is_still_a_protocol_error():
    decoder = MqttDecoder()
    decoder.feed(b"\x40\x02\x00\x01")
    with pytest.raises(MqttError, match="before CONNECT"):
        decoder.next_packet()


def test_a_topic_name_read_before_is_checked_as_before():
    """Topic Names are kept once read and found valid: the same name again reads the same, and a
    name with a wildcard is refused every time it comes."""
    decoder = MqttDecoder(version=MQTT_3_1_1)
    for _ in range(2):
        decoder.feed(encode(Publish("cars/7/speed", b"1", 1, packet_id=3), MQTT_3_1_1))
        assert decoder.next_packet() == Publish("cars/7/speed", b"1", 1, packet_id=3)
    for _ in range(2):
        bad = MqttDecoder(version=MQTT_3_1_1)
        bad.feed(b"\x30\x05\x00\x03a/+")
        with pytest.raises(MqttError) as refused:
            bad.next_packet()
        assert refused.value.reason == ReasonCode.TOPIC_NAME_INVALID
