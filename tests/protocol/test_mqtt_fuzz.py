"""Fuzzing the MQTT codec: whatever bytes arrive, the decoder raises MqttError or nothing and
always finishes; every valid packet of either protocol level reads back as it was written, in
whatever pieces its bytes come."""

from __future__ import annotations

import contextlib
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.protocol import ProtocolError
from magnetar.protocol.mqtt import MQTT_3_1_1, MQTT_5, MqttDecoder, MqttError, encode

from .mqtt_strategies import packet_kinds, packets

# Seconds each: ``make test-quick`` leaves them out.
slow = pytest.mark.slow
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_PACKET = 64 * 1024


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def decode_all(chunks: list[bytes], version: int | None) -> list:
    """Feed the chunks and take every packet; MqttError (the only error allowed) propagates."""
    decoder = MqttDecoder(MAX_PACKET, version)
    total = sum(map(len, chunks))
    out = []
    for chunk in chunks:
        decoder.feed(chunk)
        while (packet := decoder.next_packet()) is not None:
            out.append(packet)
            assert len(out) <= total // 2 + 1, "more packets than the bytes can hold"
    assert decoder.buffered <= total
    return out


@slow
@FUZZ
@given(
    data=st.binary(max_size=2048),
    cuts=st.lists(st.integers(min_value=0), max_size=10),
    version=st.sampled_from([None, MQTT_3_1_1, MQTT_5]),
)
def test_arbitrary_bytes_raise_only_mqtt_error(data, cuts, version):
    with contextlib.suppress(MqttError):
        decode_all(chunked(data, cuts), version)


@slow
@FUZZ
@given(version=st.sampled_from([MQTT_3_1_1, MQTT_5]), data=st.data())
def test_damaged_valid_packets_raise_only_mqtt_error(version, data):
    """Valid packets with bytes flipped, cut or added: read, or refused with MqttError."""
    stream = b"".join(
        encode(p, version) for p in data.draw(st.lists(packets(version), min_size=1, max_size=4))
    )
    damaged = bytearray(stream)
    for index, value in data.draw(
        st.lists(st.tuples(st.integers(0, len(stream) - 1), st.integers(0, 255)), max_size=4)
    ):
        damaged[index] = value
    cut = data.draw(st.integers(0, len(damaged)))
    damaged = damaged[:cut] + data.draw(st.binary(max_size=8))
    with contextlib.suppress(MqttError):
        decode_all([bytes(damaged)], version)


@slow
@FUZZ
@given(
    version=st.sampled_from([MQTT_3_1_1, MQTT_5]),
    data=st.data(),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
)
def test_valid_packets_round_trip(version, data, cuts):
    sent = data.draw(st.lists(packets(version), min_size=1, max_size=5))
    stream = b"".join(encode(packet, version) for packet in sent)
    assert decode_all(chunked(stream, cuts), version) == sent


@slow
@FUZZ
@given(version=st.sampled_from([MQTT_3_1_1, MQTT_5]), data=st.data())
def test_a_server_learns_the_version_from_connect(version, data):
    """A server's decoder starts without a version: the CONNECT says it, later packets use it."""
    connect = data.draw(packet_kinds(version)["connect"])
    rest = data.draw(st.lists(packets(version, connect=False), max_size=3))
    stream = b"".join(encode(packet, version) for packet in [connect, *rest])
    assert decode_all([stream], None) == [connect, *rest]


def test_mqtt_error_is_a_protocol_error():
    assert issubclass(MqttError, ProtocolError)
