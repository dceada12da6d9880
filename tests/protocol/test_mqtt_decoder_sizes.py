"""What the MQTT decoder says of a packet before it is whole: its declared size (the broker sets
memory aside for a large one) and, for a CONNECT too large, the version to refuse it in."""

from __future__ import annotations

import pytest

from magnetar.protocol.mqtt import MQTT_3_1_1, MQTT_5, MqttDecoder, MqttError, Publish, ReasonCode, encode
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
