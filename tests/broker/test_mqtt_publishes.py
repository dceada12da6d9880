"""One entry's PUBLISH packets encoded once for all subscribers alike (publishes.py), without a
network: the shared bytes are what encoding each subscriber's packet would give, a QoS 1 or 2
packet takes any packet identifier (and DUP) between its shared head and tail, and a message
that expires is left to be encoded per subscriber."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.entries import DispatchEntry
from magnetar.broker.mqtt import publishes
from magnetar.broker.mqtt.messages import to_pulsar
from magnetar.broker.mqtt.outbound import delivery
from magnetar.protocol.mqtt import MQTT_3_1_1, MQTT_5, Properties, Publish, encode
from magnetar.protocol.mqtt.properties import NONE
from magnetar.storage.position import Position

NOW_MS = 1_700_000_000_000
#: Topic Names: no wildcard, no U+0000, no lone surrogate.
TOPICS = st.text(
    st.characters(blacklist_characters="\x00+#", blacklist_categories=("Cs",)), min_size=1, max_size=200
)


def entry(payload: bytes, properties: Properties = NONE, retain: bool = False) -> DispatchEntry:
    metadata, data = to_pulsar(payload, properties, "mqtt-car-1", 0, NOW_MS, retain)
    return DispatchEntry(Position(3, 7), data, 0, 1, metadata)


def test_a_qos0_packet_is_the_bytes_each_subscriber_would_be_sent():
    prepared = publishes.EntryPublishes(entry(b"alert", Properties(user_properties=(("area", "7"),))))
    how = delivery("alerts/7", 0, subscription_ids=(4,))
    assert prepared.encoded(MQTT_5, how) == [
        encode(
            Publish(
                "alerts/7",
                b"alert",
                0,
                properties=Properties(user_properties=(("area", "7"),), subscription_identifiers=(4,)),
            ),
            MQTT_5,
        )
    ]
    assert prepared.encoded(MQTT_3_1_1, how) == [encode(Publish("alerts/7", b"alert", 0), MQTT_3_1_1)]
    assert prepared.encoded(MQTT_5, delivery("alerts/7", 0, subscription_ids=(4,))) is prepared.encoded(
        MQTT_5, how
    )


@given(
    st.integers(1, 2),
    st.integers(1, 65535),
    st.booleans(),
    st.binary(max_size=300),
    TOPICS,
)
def test_a_packet_identifier_goes_between_the_shared_head_and_tail(qos, packet_id, dup, payload, topic):
    prepared = publishes.EntryPublishes(entry(payload, retain=True))
    for version in (MQTT_3_1_1, MQTT_5):
        parts = prepared.encoded(version, delivery(topic, qos, retain_as_published=True))[0]
        assert isinstance(parts, tuple)
        head, tail = parts
        if dup:
            head = bytes((head[0] | 0x08,)) + head[1:]
        spliced = head + packet_id.to_bytes(2, "big") + tail
        assert spliced == encode(Publish(topic, payload, qos, True, dup, packet_id), version)


def test_a_message_that_expires_is_encoded_per_subscriber():
    prepared = publishes.EntryPublishes(entry(b"x", Properties(message_expiry_interval=60)))
    assert prepared.encoded(MQTT_5, delivery("t", 0)) == [None]


def test_an_entry_is_prepared_once_for_all_its_subscribers():
    one = entry(b"x")
    assert publishes.prepared(one) is publishes.prepared(one)
    assert publishes.prepared(entry(b"x")) is not publishes.prepared(one)


def test_consumers_that_deliver_alike_share_one_delivery():
    assert delivery("a/b", 1, False, True, (2,)) is delivery("a/b", 1, False, True, (2,))
    assert delivery("a/b", 1) is not delivery("a/b", 0)


def test_entries_prepared_are_kept_within_a_byte_bound(monkeypatch):
    monkeypatch.setattr(publishes, "_PREPARED_BYTES", 2 * 1024)
    big = [entry(bytes(900) + bytes([i])) for i in range(4)]
    first = [publishes.prepared(one) for one in big]
    assert publishes.prepared(big[-1]) is first[-1]  # the latest kept
    assert publishes.prepared(big[0]) is not first[0]  # the oldest made again
