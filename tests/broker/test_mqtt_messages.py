"""MQTT 5 properties as Pulsar properties and back (messages.py), without a network: Pulsar's
MQTT handler's names, in both directions, and what does not read is passed over."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.mqtt.messages import outgoing, pulsar_properties, to_pulsar
from magnetar.protocol.headers import parse_metadata
from magnetar.protocol.mqtt import Properties
from magnetar.protocol.mqtt.properties import NONE

NOW = 1_700_000_000.0


def test_every_property_under_mops_name():
    properties = Properties(
        payload_format_indicator=1,
        message_expiry_interval=60,
        content_type="application/json",
        response_topic="replies/car-7",
        correlation_data=b"req-1",
        user_properties=(("area", "7"), ("area", "8")),
    )
    assert pulsar_properties(properties, NOW, retain=True) == [
        ("area", "7"),
        ("area", "8"),  # in order, duplicates kept
        ("MQTT_PROPERTIES_1_", "1"),
        ("MQTT_PROPERTIES_2_", str(int(NOW) + 60)),  # when it expires, as MoP keeps it
        ("MQTT_PROPERTIES_3_", "application/json"),
        ("MQTT_PROPERTIES_8_", "replies/car-7"),
        ("MQTT_PROPERTIES_9_", "req-1"),
        ("MQTT_RETAIN", "true"),
    ]
    back = outgoing(b"x", pulsar_properties(properties, NOW, retain=True))
    assert back.properties == (("area", "7"), ("area", "8"))
    assert back.retain and back.expires_at == int(NOW) + 60
    assert back.mqtt == Properties(
        payload_format_indicator=1,
        content_type="application/json",
        response_topic="replies/car-7",
        correlation_data=b"req-1",
    )


def test_binary_correlation_data_goes_as_base64():
    kept = pulsar_properties(Properties(correlation_data=b"\xff\x00\xfe"), NOW)
    assert kept == [("MQTT_PROPERTIES_9_base64", "/wD+")]
    assert outgoing(b"", kept).mqtt.correlation_data == b"\xff\x00\xfe"


@given(
    st.binary(max_size=20),
    st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8)), max_size=4),
    st.none() | st.binary(max_size=8),
    st.none() | st.text(max_size=8),
)
def test_what_an_mqtt_client_publishes_its_subscribers_get(payload, user, correlation, content_type):
    published = Properties(
        user_properties=tuple((k, v) for k, v in user if not k.startswith("MQTT_")),
        correlation_data=correlation,
        content_type=content_type,
    )
    _, data = to_pulsar(payload, published, "mqtt-c", 3, int(NOW * 1000))
    read, body = parse_metadata(memoryview(data))
    assert bytes(body) == payload and read.producer_name == "mqtt-c" and read.sequence_id == 3
    back = outgoing(payload, [(kv.key, kv.value) for kv in read.properties])
    assert back.properties == published.user_properties
    assert back.mqtt.correlation_data == correlation and back.mqtt.content_type == content_type


def test_a_pulsar_producers_properties_are_user_properties_and_mops_are_read():
    back = outgoing(
        b"p", [("k", "v"), ("MQTT_PROPERTIES_38_site", "north"), ("MQTT_PROPERTIES_3_", "text/csv")]
    )
    assert back.properties == (("k", "v"), ("site", "north"))
    assert back.mqtt == Properties(content_type="text/csv") and not back.retain


def test_a_property_that_does_not_read_is_passed_over():
    back = outgoing(
        b"p", [("MQTT_PROPERTIES_2_", "soon"), ("MQTT_PROPERTIES_1_", "x"), ("MQTT_PROPERTIES_9_base64", "!")]
    )
    assert back.expires_at is None and back.mqtt is NONE


def test_the_published_qos_is_kept_and_read_back_not_shown_as_a_user_property():
    for qos in (0, 1, 2):
        kept = pulsar_properties(Properties(user_properties=(("k", "v"),)), NOW, qos=qos)
        assert kept == [("k", "v"), ("MQTT_QOS", str(qos))]
        back = outgoing(b"x", kept)
        assert (back.qos, back.properties) == (qos, (("k", "v"),))


def test_a_message_not_published_over_mqtt_goes_at_the_granted_qos():
    """No MQTT_QOS (a Pulsar producer's, the Spark sink's, a REST one): nothing caps its QoS; a
    Pulsar producer may ask for less, and a value that does not read is passed over."""
    assert outgoing(b"x", [("k", "v")]).qos == 2
    assert outgoing(b"x", [("MQTT_QOS", "0")]).qos == 0
    assert outgoing(b"x", [("MQTT_QOS", "7")]).qos == 2
    assert outgoing(b"x", [("MQTT_QOS", "high")]).qos == 2
