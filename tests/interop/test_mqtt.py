"""MQTT 3.1.1 and 5.0 against the real broker process, with two independent clients (paho-mqtt
and gmqtt) and the official pulsar-client on the Pulsar side (docs/mqtt.md)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pulsar
import pytest

from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    MQTT_5,
    ConnAck,
    Disconnect,
    Properties,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
)
from magnetar.protocol.mqtt.pulsar_names import pulsar_topic

from ..waiting import eventually
from .mqtt_support import PahoClient, RawClient

VERSIONS = [pytest.param(MQTT_3_1_1, id="3.1.1"), pytest.param(MQTT_5, id="5.0")]


@pytest.fixture
def mqtt_broker(broker_factory):
    return broker_factory({"mqtt_port": 0})


@pytest.fixture
def client(mqtt_broker, client_factory):
    """The official Pulsar client, on the MQTT broker's Pulsar port."""
    return client_factory(mqtt_broker.service_url)


def pulsar_name(mqtt_name: str) -> str:
    return str(pulsar_topic(mqtt_name, "public", "default"))


def unique(prefix: str) -> str:
    return f"{prefix}/{uuid.uuid4().hex[:8]}"


def drain(consumer, count: int) -> list:
    messages = []
    for _ in range(count):
        message = consumer.receive(10_000)
        consumer.acknowledge(message)
        messages.append(message)
    return messages


def nothing_more(consumer) -> bool:
    with pytest.raises(pulsar.Timeout):
        consumer.receive(300)
    return True


# -- MQTT -> Pulsar --------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_paho_publishes_at_each_qos_read_by_the_pulsar_consumer(mqtt_broker, client, version):
    name = unique("sensors/temp")
    consumer = client.subscribe(pulsar_name(name), "reader")
    paho = PahoClient(mqtt_broker.mqtt_port, f"paho-{version}", version)
    try:
        props = [("unit", "C"), ("site", "7")] if version == MQTT_5 else None
        for qos in (0, 1, 2):
            paho.publish(name, f"qos{qos}".encode(), qos, props)
    finally:
        paho.close()
    messages = drain(consumer, 3)
    assert [m.data() for m in messages] == [b"qos0", b"qos1", b"qos2"]
    assert {m.producer_name() for m in messages} == {f"mqtt-paho-{version}"}
    # User Properties are the Pulsar message's properties; MQTT_QOS says the QoS of each PUBLISH
    user = {"unit": "C", "site": "7"} if version == MQTT_5 else {}
    assert [m.properties() for m in messages] == [{**user, "MQTT_QOS": str(qos)} for qos in (0, 1, 2)]
    assert nothing_more(consumer)


@pytest.mark.parametrize("version", VERSIONS)
def test_gmqtt_publishes_at_each_qos_read_by_the_pulsar_consumer(mqtt_broker, client, version):
    import gmqtt

    name = unique("gmqtt/pub")
    consumer = client.subscribe(pulsar_name(name), "reader")

    async def run() -> list:
        mqtt = gmqtt.Client(f"gmqtt-{version}")
        await mqtt.connect("127.0.0.1", mqtt_broker.mqtt_port, version=version)
        for qos in (0, 1, 2):
            properties = {"user_property": [("k", f"{qos}")]} if version == MQTT_5 else {}
            mqtt.publish(name, f"g{qos}".encode(), qos=qos, **properties)
        # The Pulsar consumer reads them while gmqtt's loop runs its acknowledgement flows.
        read = await asyncio.to_thread(drain, consumer, 3)
        await mqtt.disconnect()
        return read

    messages = asyncio.run(run())
    assert [m.data() for m in messages] == [b"g0", b"g1", b"g2"]
    if version == MQTT_5:
        assert [m.properties() for m in messages] == [{"k": f"{q}", "MQTT_QOS": f"{q}"} for q in (0, 1, 2)]
    assert nothing_more(consumer)


# -- Pulsar -> MQTT --------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_pulsar_producer_to_paho_subscriber(mqtt_broker, client, version, qos):
    name = unique("alerts/area")
    paho = PahoClient(mqtt_broker.mqtt_port, f"sub-{version}-{qos}", version)
    try:
        assert paho.subscribe(name, qos) == [qos]
        producer = client.create_producer(
            pulsar_name(name), batching_enabled=True, batching_max_publish_delay_ms=5
        )
        payloads = [bytes([i]) * (i + 1) + b"\x00\xff" for i in range(20)]
        for payload in payloads:
            producer.send_async(payload, None, properties={"area": "7"})
        producer.flush()
        eventually(lambda: len(paho.received.messages) >= 20, what="20 messages")
        assert paho.received.payloads() == payloads  # untouched, in order, batches taken apart
        topics = {m[0] for m in paho.received.messages}
        assert topics == {name}
        assert {m[2] for m in paho.received.messages} == {qos}
        expected = (("area", "7"),) if version == MQTT_5 else ()
        assert {m[3] for m in paho.received.messages} == {expected}
    finally:
        paho.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_gmqtt_subscriber_gets_pulsar_messages(mqtt_broker, client, version):
    import gmqtt

    name = unique("gmqtt/sub")

    async def run() -> list[tuple[str, bytes, int]]:
        got: list[tuple[str, bytes, int]] = []
        subscribed = asyncio.Event()
        mqtt = gmqtt.Client(f"gsub-{version}")
        mqtt.on_message = lambda c, topic, payload, qos, properties: got.append((topic, payload, qos)) or 0
        mqtt.on_subscribe = lambda *args: subscribed.set()
        await mqtt.connect("127.0.0.1", mqtt_broker.mqtt_port, version=version)
        mqtt.subscribe(name, qos=1)
        await asyncio.wait_for(subscribed.wait(), 10)
        producer = client.create_producer(pulsar_name(name))
        for i in range(5):
            producer.send(f"m{i}".encode())
        deadline = time.monotonic() + 10
        while len(got) < 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await mqtt.disconnect()
        return got

    got = asyncio.run(run())
    assert got == [(name, f"m{i}".encode(), 1) for i in range(5)]


# -- wildcards -------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_wildcards_over_existing_topics_and_topics_created_later(mqtt_broker, client, version):
    city = unique("city")
    before = client.create_producer(pulsar_name(f"{city}/north/temp"))
    paho = PahoClient(mqtt_broker.mqtt_port, f"wild-{version}", version)
    try:
        assert paho.subscribe(f"{city}/+/temp", 1) == [1]
        later = client.create_producer(pulsar_name(f"{city}/south/temp"))  # made after SUBSCRIBE
        other = client.create_producer(pulsar_name(f"{city}/south/wind"))  # matches no filter
        before.send(b"north")
        later.send(b"south")
        other.send(b"wind")
        paho.publish(f"{city}/east/temp", b"east", 1)  # a topic an MQTT client makes
        eventually(lambda: len(paho.received.messages) >= 3, what="three temperatures")
        got = sorted((m[0], m[1]) for m in paho.received.messages)
        assert got == sorted(
            [
                (f"{city}/north/temp", b"north"),
                (f"{city}/south/temp", b"south"),
                (f"{city}/east/temp", b"east"),
            ]
        )
    finally:
        paho.close()


def test_unsubscribe_stops_delivery(mqtt_broker, client):
    name = unique("unsub")
    paho = PahoClient(mqtt_broker.mqtt_port, "unsub", MQTT_5)
    try:
        paho.subscribe(f"{name}/#", 0)
        paho.publish(f"{name}/a", b"1", 1)
        eventually(lambda: paho.received.payloads() == [b"1"], what="the first message")
        paho.unsubscribe(f"{name}/#")
        paho.publish(f"{name}/a", b"2", 1)
        paho.publish(f"{name}/a", b"3", 1)
        reader = client.subscribe(
            pulsar_name(f"{name}/a"), "check", initial_position=pulsar.InitialPosition.Earliest
        )
        assert [m.data() for m in drain(reader, 3)] == [b"1", b"2", b"3"]  # stored, all three
        paho.subscribe(f"{name}/b", 0)  # answered after anything sent before it: "2", "3" would be in
        assert paho.received.payloads() == [b"1"]
    finally:
        paho.close()


# -- QoS 2: exactly once ---------------------------------------------------------------------------
def test_qos2_sent_again_is_stored_once(mqtt_broker, client):
    name = unique("once")
    consumer = client.subscribe(pulsar_name(name), "reader")
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        assert raw.connect("raw-once").reason_code == 0
        publish = Publish(name, b"exactly-once", 2, packet_id=7)
        raw.send(publish)
        assert raw.receive() == PubRec(7)
        raw.send(Publish(name, b"exactly-once", 2, dup=True, packet_id=7))
        assert raw.receive() == PubRec(7)
        raw.send(PubRel(7))
        assert raw.receive() == PubComp(7)
        raw.send(PubRel(7))  # released already: 5.0 says so
        assert raw.receive() == PubComp(7, ReasonCode.PACKET_IDENTIFIER_NOT_FOUND)
        raw.send(Publish(name, b"next", 2, packet_id=7))  # the identifier, free again: a new message
        assert raw.receive() == PubRec(7)
    finally:
        raw.close()
    assert [m.data() for m in drain(consumer, 2)] == [b"exactly-once", b"next"]
    assert nothing_more(consumer)


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_qos2_sent_again_after_kill_9_is_stored_once(mqtt_broker, client_factory, version):
    name = unique("restart")
    # A session that outlives its connection: 3.1.1's Clean Session 0; 5.0's needs a Session Expiry
    # Interval, for without one it ends when the connection closes (3.1.2.11.2), its QoS 2 state
    # with it, and the resent PUBLISH is a new message (seen stored twice whenever the broker had
    # deleted that state before the kill).
    kept = Properties(session_expiry_interval=3600) if version == MQTT_5 else Properties()
    raw = RawClient(mqtt_broker.mqtt_port, version)
    assert raw.connect("survivor", clean=False, properties=kept).reason_code == 0
    raw.send(Publish(name, b"before-the-crash", 2, packet_id=42))
    assert raw.receive() == PubRec(42)  # stored, and its record committed
    raw.close()
    mqtt_broker.kill9()
    mqtt_broker.restart()
    raw = RawClient(mqtt_broker.mqtt_port, version)
    try:
        connack = raw.connect("survivor", clean=False, properties=kept)
        assert (connack.reason_code, connack.session_present) == (0, True)  # the session is back
        raw.send(Publish(name, b"before-the-crash", 2, dup=True, packet_id=42))  # no PUBREC came: sent again
        assert raw.receive() == PubRec(42)
        raw.send(PubRel(42))
        assert raw.receive() == PubComp(42)
    finally:
        raw.close()
    pulsar_client = client_factory(mqtt_broker.service_url)
    # A last message after it: what comes before that is the whole topic, read as it arrives.
    pulsar_client.create_producer(pulsar_name(name)).send(b"after")
    reader = pulsar_client.create_reader(pulsar_name(name), pulsar.MessageId.earliest)
    got = [reader.read_next(10_000).data()]
    while got[-1] != b"after":
        got.append(reader.read_next(10_000).data())
    assert got == [b"before-the-crash", b"after"]  # stored once


# -- sessions and client ids ------------------------------------------------------------------------
def test_an_empty_client_id_is_assigned_or_refused_as_the_standard_says(mqtt_broker):
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        connack = raw.connect("")
        assert connack.reason_code == 0
        assert connack.properties.assigned_client_identifier
    finally:
        raw.close()
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_3_1_1)
    try:
        assert raw.connect("", clean=False) == ConnAck(False, 2)  # 3.1.1: identifier rejected
        assert raw.closed_after() == []
    finally:
        raw.close()


def test_a_second_connection_of_a_client_id_takes_the_session_over(mqtt_broker):
    first = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    second = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        assert first.connect("twice").reason_code == 0
        assert second.connect("twice").reason_code == 0
        assert first.closed_after() == [Disconnect(ReasonCode.SESSION_TAKEN_OVER)]
    finally:
        first.close()
        second.close()


@pytest.mark.slow
def test_keep_alive_closes_a_silent_client(mqtt_broker):
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        assert raw.connect("silent", keep_alive=1).reason_code == 0
        started = time.monotonic()
        assert raw.closed_after(timeout=10) == [Disconnect(ReasonCode.KEEP_ALIVE_TIMEOUT)]
        assert 1.4 < time.monotonic() - started < 5
    finally:
        raw.close()


# -- bad input --------------------------------------------------------------------------------------
def test_bad_input_costs_only_its_connection(mqtt_broker, client):
    """Each breach is answered as the standard says, and a client publishing meanwhile loses nothing."""
    name = unique("steady")
    consumer = client.subscribe(pulsar_name(name), "reader")
    steady = PahoClient(mqtt_broker.mqtt_port, "steady", MQTT_5)
    port = mqtt_broker.mqtt_port
    try:
        steady.publish(name, b"1", 1)
        # a PUBLISH before CONNECT: closed
        raw = RawClient(port, MQTT_5)
        raw.send(Publish("a", b"x"))
        assert raw.closed_after() == []
        # an unsupported protocol level: CONNACK return code 1, then closed (3.1.1's answer)
        raw = RawClient(port, MQTT_3_1_1)
        raw.send_bytes(b"\x10\x0c\x00\x04MQTT\x03\x02\x00\x3c\x00\x00")
        assert raw.closed_after() == [ConnAck(False, 1)]
        # 5.0: a wildcard in a PUBLISH's Topic Name: DISCONNECT Topic Name invalid
        raw = RawClient(port, MQTT_5)
        raw.connect("bad-topic")
        raw.send_bytes(b"\x30\x06\x00\x03a/#\x00")
        assert raw.closed_after() == [
            Disconnect(
                ReasonCode.TOPIC_NAME_INVALID, Properties(reason_string="Topic Name 'a/#' holds a wildcard")
            )
        ]
        # 5.0: a packet over the Maximum Packet Size the broker announced: Packet too large
        raw = RawClient(port, MQTT_5)
        limit = raw.connect("too-big").properties.maximum_packet_size
        raw.send_bytes(b"\x30" + _varint(limit + 10))
        (answer,) = raw.closed_after()
        assert answer.reason_code == ReasonCode.PACKET_TOO_LARGE
        # 5.0: malformed (QoS 3): Malformed Packet
        raw = RawClient(port, MQTT_5)
        raw.connect("qos3")
        raw.send_bytes(b"\x36\x05\x00\x01a\x00\x01")
        (answer,) = raw.closed_after()
        assert answer.reason_code == ReasonCode.MALFORMED_PACKET
        # 3.1.1: a second CONNECT: closed without a word
        raw = RawClient(port, MQTT_3_1_1)
        raw.connect("twice-connected")
        raw.send_bytes(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00")
        assert raw.closed_after() == []
        steady.publish(name, b"2", 2)
    finally:
        steady.close()
    assert [m.data() for m in drain(consumer, 2)] == [b"1", b"2"]


def _varint(value: int) -> bytes:
    from magnetar.protocol.mqtt.primitives import varint

    return varint(value)


@pytest.mark.parametrize("version", VERSIONS)
def test_acknowledgements_come_in_the_order_of_the_publishes(mqtt_broker, version):
    """PUBACKs go in the order the PUBLISHes came (MQTT-4.6.0-2), also when a later one is stored
    sooner (another topic; a retained one waits for its record too). (paho reports a QoS 2 flow
    at its PUBCOMP, which 4.6 does not order: PUBREC shares the PUBACK's path.)"""
    paho = PahoClient(mqtt_broker.mqtt_port, unique("ordered"), version)
    order: list[int] = []
    paho.client.on_publish = lambda client, userdata, mid, reason, properties: order.append(mid)
    first, second = unique("ordered/a"), unique("ordered/b")
    try:
        for warm in (first, second):
            paho.publish(warm, b"first", 1)
        order.clear()
        sent = []
        for _ in range(20):
            for k in range(6):
                info = paho.client.publish(first if k % 2 == 0 else second, b"v", 1, retain=k % 2 == 0)
                sent.append(info.mid)
        eventually(lambda: len(order) == len(sent), what="every acknowledgement")
        assert order == sent
    finally:
        paho.close()
