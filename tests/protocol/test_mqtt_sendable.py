"""``sendable``: whatever a stored message holds, what it returns encodes (or is None)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol.mqtt import MQTT_5, Properties, Publish, encode
from magnetar.protocol.mqtt.sendable import MAX_U32, sendable

text = st.text(max_size=20) | st.just("a\x00b") | st.just("x" * 70_000)


@given(
    topic=text,
    content_type=st.none() | text,
    response_topic=st.none() | text,
    pairs=st.lists(st.tuples(text, text), max_size=3),
    expiry=st.none() | st.integers(0, 2**40),
    correlation=st.none() | st.binary(max_size=10) | st.just(b"c" * 70_000),
)
def test_what_sendable_returns_encodes(topic, content_type, response_topic, pairs, expiry, correlation):
    properties = Properties(
        content_type=content_type,
        response_topic=response_topic,
        user_properties=tuple(pairs),
        message_expiry_interval=expiry,
        correlation_data=correlation,
    )
    packet, problems = sendable(Publish(topic, b"p", 1, packet_id=1, properties=properties))
    if packet is None:
        assert problems
        return
    encode(packet, MQTT_5)  # raises for anything left that cannot be encoded
    assert packet.topic == topic and packet.payload == b"p"
    assert all(pair in pairs for pair in packet.properties.user_properties)


def test_what_can_be_encoded_is_kept_and_what_cannot_is_named():
    properties = Properties(
        content_type="text/plain",
        user_properties=(("k", "a\x00b"), ("ok", "1")),
        message_expiry_interval=2**33,
    )
    packet, problems = sendable(Publish("t", b"", 0, properties=properties))
    assert packet is not None
    assert packet.properties == Properties(
        content_type="text/plain", user_properties=(("ok", "1"),), message_expiry_interval=MAX_U32
    )
    assert problems == ["user property 'k'"]
    assert sendable(Publish("a/#", b""))[0] is None
    assert sendable(Publish("a\x00", b""))[0] is None
