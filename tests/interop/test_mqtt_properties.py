"""MQTT 5 properties against the real broker process (docs/mqtt.md, MQTT 5 properties): content
type, response topic, correlation data, payload format indicator and message expiry between MQTT
clients and to and from the official pulsar-client (Pulsar's MQTT handler's property names);
Topic Aliases both ways; Receive Maximum both ways; the client's Maximum Packet Size; Reason
Strings and Request Problem Information; Subscription Identifiers. paho-mqtt and gmqtt, and a
raw client where the flow itself is checked."""

from __future__ import annotations

import asyncio
import time

import pytest

from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    MQTT_5,
    ConnAck,
    Disconnect,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    Publish,
    PubRec,
    ReasonCode,
    Subscribe,
    encode,
)
from magnetar.protocol.mqtt.packets import SubAck, Subscription

from ..waiting import eventually
from .mqtt_support import PahoClient, RawClient
from .test_mqtt import drain, pulsar_name, unique


@pytest.fixture
def mqtt_broker(broker_factory):
    return broker_factory({"mqtt_port": 0})


def subscribed_raw(port: int, topic_filter: str, qos: int = 1, **connect_properties) -> RawClient:
    raw = RawClient(port, MQTT_5)
    raw.connect(unique("raw"), properties=Properties(**connect_properties))
    raw.send(Subscribe(1, (Subscription(topic_filter, qos),)))
    assert raw.receive() == SubAck(1, (qos,))
    return raw


def test_publish_properties_reach_pulsar_consumers_and_mqtt_subscribers(mqtt_broker, client_factory):
    import gmqtt

    name = unique("requests")
    reader = client_factory(mqtt_broker.service_url).subscribe(pulsar_name(name), "reader")
    v5 = PahoClient(mqtt_broker.mqtt_port, unique("v5"), MQTT_5)
    v311 = PahoClient(mqtt_broker.mqtt_port, unique("v311"), MQTT_3_1_1)
    got_gmqtt: list = []

    async def with_gmqtt() -> None:
        mqtt = gmqtt.Client(unique("g"))
        mqtt.on_message = lambda c, t, payload, q, properties: got_gmqtt.append(properties) or 0
        subscribed = asyncio.Event()
        mqtt.on_subscribe = lambda *args: subscribed.set()
        await mqtt.connect("127.0.0.1", mqtt_broker.mqtt_port, version=MQTT_5)
        mqtt.subscribe(name, qos=1)
        await asyncio.wait_for(subscribed.wait(), 10)
        await asyncio.to_thread(publish)
        deadline = time.monotonic() + 10
        while not got_gmqtt and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await mqtt.disconnect()

    def publish() -> None:
        publisher = PahoClient(mqtt_broker.mqtt_port, unique("requester"), MQTT_5)
        try:
            publisher.publish(
                name,
                "ünïcode".encode(),
                1,
                user_properties=[("trace", "t-1")],
                ContentType="text/plain; charset=utf-8",
                ResponseTopic="replies/requester",
                CorrelationData=b"\x01\x02\xff",
                PayloadFormatIndicator=1,
                MessageExpiryInterval=3600,
            )
        finally:
            publisher.close()

    try:
        v5.subscribe(name, 1)
        v311.subscribe(name, 1)
        asyncio.run(with_gmqtt())
        eventually(lambda: v5.received.messages and v311.received.messages, what="both subscribers")
    finally:
        v5.close()
        v311.close()
    (message,) = drain(reader, 1)
    properties = message.properties()
    deadline = int(properties.pop("MQTT_PROPERTIES_2_"))
    assert 3590 <= deadline - time.time() <= 3601
    assert properties == {
        "trace": "t-1",
        "MQTT_PROPERTIES_1_": "1",
        "MQTT_PROPERTIES_3_": "text/plain; charset=utf-8",
        "MQTT_PROPERTIES_8_": "replies/requester",
        "MQTT_PROPERTIES_9_base64": "AQL/",  # not UTF-8: kept in base64
        "MQTT_QOS": "1",
    }
    sent = v5.received.properties[0]
    assert sent["ContentType"] == "text/plain; charset=utf-8" and sent["ResponseTopic"] == "replies/requester"
    assert sent["CorrelationData"] == "0102ff" and sent["PayloadFormatIndicator"] == 1
    assert 3590 <= sent["MessageExpiryInterval"] <= 3600 and sent["UserProperty"] == [("trace", "t-1")]
    (from_gmqtt,) = got_gmqtt
    assert from_gmqtt["content_type"] == ["text/plain; charset=utf-8"]
    assert from_gmqtt["correlation_data"] == [b"\x01\x02\xff"]
    assert v311.received.messages[0][1] == "ünïcode".encode()  # 3.1.1: the payload, no properties


def test_a_pulsar_producer_sets_mqtt_properties(mqtt_broker, client_factory):
    name = unique("from-pulsar")
    raw = subscribed_raw(mqtt_broker.mqtt_port, name)
    try:
        producer = client_factory(mqtt_broker.service_url).create_producer(pulsar_name(name))
        producer.send(
            b"{}",
            properties={
                "k": "v",
                "MQTT_PROPERTIES_3_": "application/json",
                "MQTT_PROPERTIES_8_": "replies/x",
                "MQTT_PROPERTIES_9_": "corr-7",
                "MQTT_PROPERTIES_38_site": "north",  # MoP's spelling of a User Property
            },
        )
        sent = raw.receive()
        assert isinstance(sent, Publish)
        p = sent.properties
        assert (p.content_type, p.response_topic, p.correlation_data) == (
            "application/json",
            "replies/x",
            b"corr-7",
        )
        assert sorted(p.user_properties) == [("k", "v"), ("site", "north")]
    finally:
        raw.close()


@pytest.mark.slow
def test_an_expired_message_is_not_delivered(mqtt_broker):
    name = unique("expiry")
    away = PahoClient(mqtt_broker.mqtt_port, "away", MQTT_5, clean=False, session_expiry=3600)
    try:
        away.subscribe(name, 1)
    finally:
        away.close()
    publisher = PahoClient(mqtt_broker.mqtt_port, unique("pub"), MQTT_5)
    try:
        publisher.publish(name, b"stale soon", 1, MessageExpiryInterval=1)
        publisher.publish(name, b"lasting", 1, MessageExpiryInterval=600)
    finally:
        publisher.close()
    published = time.monotonic()
    eventually(lambda: time.monotonic() - published > 2.0, what="the short expiry passing")
    back = PahoClient(mqtt_broker.mqtt_port, "away", MQTT_5, clean=False, session_expiry=3600)
    try:
        eventually(lambda: back.received.messages, what="what is left")
        assert back.received.payloads() == [b"lasting"]
        assert back.received.properties[0]["MessageExpiryInterval"] <= 598  # what is left of it
    finally:
        back.close()


def test_topic_aliases_both_ways(mqtt_broker, client_factory):
    name = unique("aliased")
    reader = client_factory(mqtt_broker.service_url).subscribe(pulsar_name(name), "reader")
    raw = subscribed_raw(mqtt_broker.mqtt_port, name, 0, topic_alias_maximum=4)
    try:
        # client -> broker: the name once with its alias, then the alias alone
        raw.send(Publish(name, b"set", 0, properties=Properties(topic_alias=2)))
        raw.send(Publish("", b"used", 0, properties=Properties(topic_alias=2)))
        # broker -> client: it gave the topic alias 1
        first, second = raw.receive(), raw.receive()
        assert (first.topic, first.properties.topic_alias, first.payload) == (name, 1, b"set")
        assert (second.topic, second.properties.topic_alias, second.payload) == ("", 1, b"used")
    finally:
        raw.close()
    assert [m.data() for m in drain(reader, 2)] == [b"set", b"used"]


def test_gmqtt_takes_the_brokers_topic_aliases(mqtt_broker, client_factory):
    import gmqtt

    name = unique("gmqtt/alias")
    got: list = []

    async def run() -> None:
        mqtt = gmqtt.Client(unique("galias"), topic_alias_maximum=10)
        mqtt.on_message = lambda c, topic, payload, q, properties: got.append((topic, payload)) or 0
        subscribed = asyncio.Event()
        mqtt.on_subscribe = lambda *args: subscribed.set()
        await mqtt.connect("127.0.0.1", mqtt_broker.mqtt_port, version=MQTT_5)
        mqtt.subscribe(name, qos=0)
        await asyncio.wait_for(subscribed.wait(), 10)
        producer = client_factory(mqtt_broker.service_url).create_producer(pulsar_name(name))
        for i in range(3):
            await asyncio.to_thread(producer.send, f"{i}".encode())
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await mqtt.disconnect()

    asyncio.run(run())
    assert got == [(name, b"0"), (name, b"1"), (name, b"2")]


def test_receive_maximum_holds_back_what_the_client_has_not_acknowledged(mqtt_broker, client_factory):
    name = unique("flow")
    raw = subscribed_raw(mqtt_broker.mqtt_port, name, 1, receive_maximum=2)
    try:
        producer = client_factory(mqtt_broker.service_url).create_producer(pulsar_name(name))
        for i in range(5):
            producer.send(f"{i}".encode())
        first, second = raw.receive(), raw.receive()
        assert [first.payload, second.payload] == [b"0", b"1"]
        raw.send(PingReq())
        assert raw.receive() == PingResp()  # nothing more while two are unacknowledged
        raw.send(PubAck(first.packet_id))
        third = raw.receive()
        assert third.payload == b"2"
        raw.send(PingReq())
        assert raw.receive() == PingResp()
    finally:
        raw.close()


@pytest.mark.slow
def test_the_brokers_receive_maximum_is_enforced(broker_factory):
    broker = broker_factory({"mqtt_port": 0, "max_pending_publish_requests_per_connection": 2})
    raw = RawClient(broker.mqtt_port, MQTT_5)
    try:
        assert raw.connect(unique("greedy")).properties.receive_maximum == 2
        for packet_id in (1, 2):  # QoS 2 without PUBREL: unacknowledged until PUBCOMP
            raw.send(Publish("greedy", b"x", 2, packet_id=packet_id))
            assert raw.receive() == PubRec(packet_id)
        raw.send(Publish("greedy", b"x", 2, packet_id=3))
        (answer,) = raw.closed_after()
        assert isinstance(answer, Disconnect) and answer.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
    finally:
        raw.close()


def test_a_message_over_the_clients_maximum_packet_size_is_not_sent(mqtt_broker, client_factory):
    name = unique("small")
    raw = subscribed_raw(mqtt_broker.mqtt_port, name, 1, maximum_packet_size=200)
    try:
        producer = client_factory(mqtt_broker.service_url).create_producer(pulsar_name(name))
        producer.send(b"x" * 300)
        producer.send(b"fits")
        sent = raw.receive()
        assert sent.payload == b"fits"  # the large one never came (3.1.2.11.4)
        raw.send(PubAck(sent.packet_id))
    finally:
        raw.close()


def test_reason_strings_unless_the_client_asks_for_none(mqtt_broker):
    not_utf8 = Publish("pfi", b"\xff\xfe", 1, packet_id=1, properties=Properties(payload_format_indicator=1))
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        raw.connect(unique("told"))
        raw.send(not_utf8)
        answer = raw.receive()
        assert (answer.packet_id, answer.reason_code) == (1, ReasonCode.PAYLOAD_FORMAT_INVALID)
        assert "UTF-8" in answer.properties.reason_string
    finally:
        raw.close()
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        raw.connect(unique("quiet"), properties=Properties(request_problem_information=0))
        raw.send(not_utf8)
        assert raw.receive() == PubAck(1, ReasonCode.PAYLOAD_FORMAT_INVALID)  # no Reason String
    finally:
        raw.close()


def test_subscription_identifiers(mqtt_broker, client_factory):
    name = unique("ids")
    paho = PahoClient(mqtt_broker.mqtt_port, unique("ider"), MQTT_5)
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        connack = raw.connect(unique("probe"))
        assert isinstance(connack, ConnAck) and connack.properties.subscription_identifier_available is None
        paho.subscribe(f"{name}/+", 1, subscription_id=7)
        paho.subscribe(f"{name}/#", 1, subscription_id=9)
        paho.subscribe(f"{name}/other", 1)
        producer = client_factory(mqtt_broker.service_url)
        for topic in (f"{name}/a", f"{name}/other"):
            producer.create_producer(pulsar_name(topic)).send(topic.encode())
        eventually(lambda: len(paho.received.messages) == 2, what="both")
        by_topic = {m[0]: p for m, p in zip(paho.received.messages, paho.received.properties, strict=True)}
        assert sorted(by_topic[f"{name}/a"]["SubscriptionIdentifier"]) == [7, 9]  # one message, both ids
        assert sorted(by_topic[f"{name}/other"]["SubscriptionIdentifier"]) == [7, 9]  # the third has none
    finally:
        paho.close()
        raw.close()


@pytest.mark.parametrize("version", [MQTT_3_1_1, MQTT_5], ids=["3.1.1", "5.0"])
def test_a_pulsar_message_mqtt_cannot_carry_ends_no_subscriber(mqtt_broker, client_factory, version):
    """A property with U+0000 or past 65,535 bytes is left out; a message whose topic decodes to
    a Topic Name with a wildcard is not sent to MQTT clients (and acknowledged: a durable session
    moves past it). The subscriber stays connected and gets what follows."""
    name = unique("unsendable")
    client_id = unique("unsendable-sub")
    expiry = 3600 if version == MQTT_5 else None
    paho = PahoClient(mqtt_broker.mqtt_port, client_id, version, clean=False, session_expiry=expiry)
    pulsar = client_factory(mqtt_broker.service_url)
    try:
        paho.subscribe(f"{name}/#", 1)
        wildcard = pulsar.create_producer(pulsar_name(name) + "%2Fa%23b")  # MQTT name: {name}/a#b
        wildcard.send(b"wildcard")
        producer = pulsar.create_producer(pulsar_name(f"{name}/ok"))
        producer.send(b"bad", properties={"nul": "a\x00b", "long": "x" * 70_000, "fine": "1"})
        producer.send(b"after")
        eventually(lambda: paho.received.payloads() == [b"bad", b"after"], what="the messages after it")
        assert paho.client.is_connected()
        if version == MQTT_5:
            assert paho.received.messages[0][3] == (("fine", "1"),)
    finally:
        paho.close()
    producer.send(b"marker")
    paho = PahoClient(mqtt_broker.mqtt_port, client_id, version, clean=False, session_expiry=expiry)
    try:
        assert paho.session_present is True
        eventually(lambda: paho.received.payloads() == [b"marker"], what="the marker, and nothing before it")
    finally:
        paho.close()


def test_a_topic_alias_is_set_only_by_a_publish_that_is_sent(mqtt_broker, client_factory):
    """A PUBLISH too large for the client's Maximum Packet Size (a retained one at SUBSCRIBE; one
    that fits only without the alias's 3 bytes) sets no Topic Alias: the next one that is sent
    carries the Topic Name with it."""
    name = unique("alias-size")
    publisher = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        publisher.connect(unique("alias-pub"))
        publisher.send(Publish(name, b"R" * 500, 1, retain=True, packet_id=1))
        assert publisher.receive() == PubAck(1)
    finally:
        publisher.close()
    raw = subscribed_raw(mqtt_broker.mqtt_port, name, 1, maximum_packet_size=200, topic_alias_maximum=5)
    try:
        producer = client_factory(mqtt_broker.service_url).create_producer(pulsar_name(name))
        without_alias = len(encode(Publish(name, b"", 1, packet_id=1), MQTT_5))
        producer.send(b"A" * (200 - without_alias))  # 200 bytes; 203 with a Topic Alias
        producer.send(b"small0")
        producer.send(b"small1")
        first = raw.receive()
        assert (first.topic, first.properties.topic_alias, first.payload) == (name, 1, b"small0")
        second = raw.receive()
        assert (second.topic, second.properties.topic_alias, second.payload) == ("", 1, b"small1")
    finally:
        raw.close()


def test_a_message_too_large_for_the_client_takes_no_receive_maximum_slot(mqtt_broker, client_factory):
    """A QoS 1 message past the client's Maximum Packet Size is discarded as if delivered
    (3.1.2.11.4): it holds none of the client's Receive Maximum, retained or not."""
    name = unique("large-slot")
    publisher = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        publisher.connect(unique("slot-pub"))
        publisher.send(Publish(name, b"R" * 500, 1, retain=True, packet_id=1))
        assert publisher.receive() == PubAck(1)
    finally:
        publisher.close()
    raw = subscribed_raw(mqtt_broker.mqtt_port, name, 1, maximum_packet_size=200, receive_maximum=1)
    try:
        producer = client_factory(mqtt_broker.service_url).create_producer(pulsar_name(name))
        producer.send(b"x" * 300)
        producer.send(b"fits")
        producer.send(b"fits too")
        first = raw.receive()
        assert first.payload == b"fits"
        raw.send(PubAck(first.packet_id))
        assert raw.receive().payload == b"fits too"
    finally:
        raw.close()


def test_no_local_leaves_out_own_messages_only_where_every_matching_filter_says_so(mqtt_broker):
    """No Local on one filter does not take the client's own messages from another filter of
    its that matches them too (3.8.3.1); with No Local on every matching filter they are left out."""
    name = unique("no-local")
    paho = PahoClient(mqtt_broker.mqtt_port, unique("local"), MQTT_5)
    try:
        paho.subscribe(f"{name}/both", 1)  # No Local 0
        paho.subscribe(f"{name}/+", 1, noLocal=True)
        paho.subscribe(f"{name}/#", 1, noLocal=True)
        paho.publish(f"{name}/only-no-local", b"left out", 1)
        paho.publish(f"{name}/both", b"own", 1)
        eventually(lambda: paho.received.payloads() == [b"own"], what="its own message, once")
    finally:
        paho.close()
    assert paho.received.payloads() == [b"own"]
