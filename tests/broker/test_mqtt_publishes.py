"""One entry's PUBLISH packets encoded once for all subscribers alike (publishes.py), without a
network: the shared bytes are what encoding each subscriber's packet would give, a QoS 1 or 2
packet takes any packet identifier (and DUP) between its shared head and tail, and a message
that expires is left to be encoded per subscriber."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.entries import DispatchEntry
from magnetar.broker.mqtt import publishes
from magnetar.broker.mqtt.messages import pulsar_properties, to_pulsar
from magnetar.broker.mqtt.outbound import delivery
from magnetar.protocol import wire
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.headers import encode_headers_and_payload
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


def batch_entry(messages: list[tuple[bytes, Properties, bool, int]]) -> DispatchEntry:
    """A batch entry of MQTT messages (payload, properties, RETAIN, QoS), as an MQTT publisher's
    PUBLISHes of one pass are stored."""
    singles = []
    for i, (payload, properties, retain, qos) in enumerate(messages):
        pairs = pulsar_properties(properties, NOW_MS / 1000, retain, qos)
        singles.append(
            (
                wire.SingleMessageMetadata(
                    sequence_id=i, properties=[wire.KeyValue(key=k, value=v) for k, v in pairs]
                ),
                payload,
            )
        )
    metadata = wire.MessageMetadata(
        producer_name="mqtt-car-1", sequence_id=0, publish_time=NOW_MS, num_messages_in_batch=len(messages)
    )
    data = encode_headers_and_payload(metadata, encode_batch(singles))
    return DispatchEntry(Position(3, 8), data, 0, len(messages), metadata)


MIXED = [
    (b"a", NONE, False, 1),
    (b"b" * 130, NONE, False, 1),  # a two-byte Remaining Length
    (b"c" * 20_000, NONE, False, 1),  # three bytes
    (b"d", Properties(user_properties=(("area", "7"),)), False, 1),
    (b"e", Properties(user_properties=(("area", "7"),)), True, 1),
    (b"f", NONE, True, 0),
    (b"g", Properties(content_type="text/plain"), False, 2),
    (b"h", NONE, False, 1),
]


@pytest.mark.parametrize("version", [MQTT_3_1_1, MQTT_5])
@pytest.mark.parametrize(
    "how",
    [
        delivery("cars/7", 1),
        delivery("cars/7", 2, retain_as_published=True, subscription_ids=(9,)),
        delivery("cars/7", 0),
    ],
)
def test_the_messages_of_a_batch_are_each_encoded_as_their_own_packet(version, how):
    """Messages alike share their packet's bytes around the payload; each still goes as it would
    alone: its own properties, RETAIN and QoS (at most the granted one), Remaining Length."""
    prepared = publishes.EntryPublishes(batch_entry(MIXED))
    assert prepared.messages is not None
    encoded = prepared.encoded(version, how)
    for message, data in zip(prepared.messages, encoded, strict=True):
        expected = publishes.packet(version, how, message)
        if expected.qos:
            assert isinstance(data, tuple)
            data = data[0] + (513).to_bytes(2, "big") + data[1]
            expected = dataclasses.replace(expected, packet_id=513)
        assert data == encode(expected, version)
    # and again for the next entry of the same kind (its shapes known already)
    again = publishes.EntryPublishes(batch_entry(MIXED)).encoded(version, how)
    assert again == encoded


def test_a_message_of_a_batch_that_cannot_go_as_it_is_is_left_to_each_subscriber():
    """A property MQTT cannot carry (U+0000 in a User Property): that message, and that one alone,
    is sent per subscriber (``Outbound._admit`` leaves the property out)."""
    bad = Properties(user_properties=(("k", "v\x00"),))
    prepared = publishes.EntryPublishes(
        batch_entry([(b"1", NONE, False, 1), (b"2", bad, False, 1), (b"3", NONE, False, 1)])
    )
    first, second, third = prepared.encoded(MQTT_5, delivery("t", 1))
    assert second is None and isinstance(first, tuple) and isinstance(third, tuple)
