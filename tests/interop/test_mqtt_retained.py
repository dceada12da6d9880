"""MQTT retained messages against the real broker process (docs/mqtt.md, Retained messages):
stored durably (they survive kill -9), sent to new subscribers with RETAIN, replaced by a later
one, cleared by an empty one; 5.0's Retain Handling and Retain As Published. paho-mqtt and gmqtt,
3.1.1 and 5.0; the official pulsar-client reads the retained publish in its topic."""

from __future__ import annotations

import asyncio
import time

import pytest

from magnetar.protocol.mqtt import MQTT_5, Properties, PubAck, Publish, ReasonCode, Subscribe
from magnetar.protocol.mqtt.packets import SubAck, Subscription

from ..waiting import eventually
from .mqtt_support import PahoClient, RawClient
from .test_mqtt import VERSIONS, drain, pulsar_name, unique


@pytest.fixture
def mqtt_broker(broker_factory):
    return broker_factory({"mqtt_port": 0})


def retained_for(port: int, topic_filter: str, version: int, count: int, qos: int = 1) -> list[tuple]:
    """(topic, payload, qos, retain) of what a new subscriber of ``topic_filter`` is sent at once:
    ``count`` retained messages, then a marker published after its SUBACK (nothing else between)."""
    marker = unique("marker")
    paho = PahoClient(port, unique("late"), version)
    try:
        paho.subscribe(topic_filter, qos)
        paho.subscribe(marker, 0)
        paho.publish(marker, b"end", 0)
        eventually(lambda: paho.received.payloads()[-1:] == [b"end"], what="the marker")
        got = [(m[0], m[1], m[2], m[4]) for m in paho.received.messages if m[0] != marker]
        assert len(got) == count, got
        return got
    finally:
        paho.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_retained_message_goes_to_each_new_subscriber(mqtt_broker, client_factory, version):
    name = unique("sensor/42/state")
    reader = client_factory(mqtt_broker.service_url).subscribe(pulsar_name(name), "reader")
    publisher = PahoClient(mqtt_broker.mqtt_port, unique("pub"), version)
    try:
        publisher.publish(name, b"first", 1, retain=True)
        publisher.publish(name, b"second", 1, retain=True)  # replaces the first
        publisher.publish(f"{name}/other", b"other", 0, retain=True)
    finally:
        publisher.close()
    assert retained_for(mqtt_broker.mqtt_port, name, version, 1) == [(name, b"second", 1, True)]
    # a wildcard gets every topic's own, at the lower of its QoS and the one granted
    got = retained_for(mqtt_broker.mqtt_port, f"{name}/#", version, 2, qos=2)
    assert sorted(got) == [(name, b"second", 1, True), (f"{name}/other", b"other", 0, True)]
    # Stored in the topic too, as any message: the Pulsar consumer reads them, marked retained.
    messages = drain(reader, 2)
    assert [m.data() for m in messages] == [b"first", b"second"]
    assert messages[0].properties() == {"MQTT_RETAIN": "true", "MQTT_QOS": "1"}


@pytest.mark.parametrize("version", VERSIONS)
def test_an_empty_retained_message_clears_it(mqtt_broker, version):
    name = unique("cleared")
    publisher = PahoClient(mqtt_broker.mqtt_port, unique("pub"), version)
    subscriber = PahoClient(mqtt_broker.mqtt_port, unique("sub"), version)
    try:
        publisher.publish(name, b"state", 1, retain=True)
        subscriber.subscribe(name, 1)
        publisher.publish(name, b"", 1, retain=True)
        # the empty one is delivered to the current subscriber as any message is
        eventually(
            lambda: subscriber.received.payloads() == [b"state", b""], what="the state, then the empty one"
        )
    finally:
        publisher.close()
        subscriber.close()
    assert retained_for(mqtt_broker.mqtt_port, name, version, 0) == []


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_retained_messages_survive_kill_9(mqtt_broker, version):
    kept, cleared = unique("kept"), unique("cleared")
    publisher = PahoClient(mqtt_broker.mqtt_port, unique("pub"), version)
    try:
        publisher.publish(cleared, b"old", 1, retain=True)
        publisher.publish(kept, b"survives", 1, retain=True)  # PUBACK: durable
        publisher.publish(cleared, b"", 1, retain=True)
    finally:
        publisher.client.loop_stop()  # no DISCONNECT: the broker dies first
    mqtt_broker.kill9()
    mqtt_broker.restart()
    assert retained_for(mqtt_broker.mqtt_port, kept, version, 1) == [(kept, b"survives", 1, True)]
    assert retained_for(mqtt_broker.mqtt_port, cleared, version, 0) == []


def test_retain_handling_and_retain_as_published(mqtt_broker):
    name = unique("options")
    publisher = PahoClient(mqtt_broker.mqtt_port, unique("pub"), MQTT_5)
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        publisher.publish(name, b"retained", 1, retain=True)
        raw.connect("options")
        # Retain Handling 2: none at SUBSCRIBE
        raw.send(Subscribe(1, (Subscription(name, 1, retain_handling=2),)))
        assert raw.receive() == SubAck(1, (1,))
        # Retain Handling 1: only for a subscription that did not exist (it does now)
        raw.send(Subscribe(2, (Subscription(name, 1, retain_handling=1),)))
        assert raw.receive() == SubAck(2, (1,))
        # Retain Handling 0 (and Retain As Published): sent again, with RETAIN
        raw.send(Subscribe(3, (Subscription(name, 1, retain_as_published=True),)))
        assert raw.receive() == SubAck(3, (1,))
        sent = raw.receive()
        assert isinstance(sent, Publish) and (sent.payload, sent.retain) == (b"retained", True)
        # Retain As Published: a live retained publish keeps its flag ...
        publisher.publish(name, b"live-retained", 0, retain=True)
        live = raw.receive()
        assert (live.payload, live.retain) == (b"live-retained", True)
        # ... and without it a subscriber is sent RETAIN 0 (3.3.1.3)
        raw.send(Subscribe(4, (Subscription(name, 1, retain_handling=2),)))
        assert raw.receive() == SubAck(4, (1,))
        publisher.publish(name, b"plain-view", 0, retain=True)
        plain = raw.receive()
        assert (plain.payload, plain.retain) == (b"plain-view", False)
    finally:
        publisher.close()
        raw.close()


def test_retained_on_a_3_1_1_subscription_is_sent_with_retain(mqtt_broker):
    """3.1.1 has no Retain As Published: live messages go with RETAIN 0, retained ones at
    SUBSCRIBE with RETAIN 1 (3.3.1.3 of 3.1.1)."""
    name = unique("v311")
    publisher = PahoClient(mqtt_broker.mqtt_port, unique("pub"), 4)
    subscriber = PahoClient(mqtt_broker.mqtt_port, unique("sub"), 4)
    try:
        publisher.publish(name, b"before", 1, retain=True)
        subscriber.subscribe(name, 1)
        publisher.publish(name, b"after", 1, retain=True)
        eventually(lambda: len(subscriber.received.messages) == 2, what="both")
        assert [(m[1], m[4]) for m in subscriber.received.messages] == [(b"before", True), (b"after", False)]
    finally:
        publisher.close()
        subscriber.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_gmqtt_retained(mqtt_broker, version):
    import gmqtt

    name = unique("gmqtt/retained")

    async def run() -> list:
        publisher = gmqtt.Client(unique("gpub"))
        await publisher.connect("127.0.0.1", mqtt_broker.mqtt_port, version=version)
        published = asyncio.Event()
        publisher.on_message = lambda *args: 0
        publisher.publish(name, b"gmqtt-retained", qos=1, retain=True)
        publisher.on_subscribe = lambda *args: published.set()
        publisher.subscribe(f"{name}-sync", qos=1)  # answered after the PUBACK above
        await asyncio.wait_for(published.wait(), 10)
        await publisher.disconnect()
        got: list = []
        subscriber = gmqtt.Client(unique("gsub"))
        subscriber.on_message = lambda c, topic, payload, qos, properties: (
            got.append((topic, payload, qos, properties.get("retain"))) or 0
        )
        await subscriber.connect("127.0.0.1", mqtt_broker.mqtt_port, version=version)
        subscriber.subscribe(name, qos=1)
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await subscriber.disconnect()
        return got

    assert asyncio.run(run()) == [(name, b"gmqtt-retained", 1, 1)]


@pytest.mark.slow
def test_a_retained_message_expires(mqtt_broker):
    name = unique("expiring-retained")
    publisher = PahoClient(mqtt_broker.mqtt_port, unique("pub"), MQTT_5)
    try:
        publisher.publish(name, b"lasting", 1, retain=True, MessageExpiryInterval=3600)
        publisher.publish(f"{name}/short", b"gone soon", 1, retain=True, MessageExpiryInterval=1)
    finally:
        publisher.close()
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        raw.connect(unique("expiry"))
        raw.send(Subscribe(1, (Subscription(name, 1),)))
        assert raw.receive() == SubAck(1, (1,))
        sent = raw.receive()
        assert sent.payload == b"lasting" and 3590 <= sent.properties.message_expiry_interval <= 3600
    finally:
        raw.close()

    def gone() -> bool:
        return retained_for(mqtt_broker.mqtt_port, f"{name}/short", MQTT_5, 0) == []

    eventually(gone, what="the short one's expiry", timeout=10)


def test_a_refused_publish_leaves_the_retained_message(broker_factory):
    """Only a message stored replaces its topic's retained message: one refused (here its
    metadata alone is past max_message_size) leaves the one before."""
    broker = broker_factory({"mqtt_port": 0, "max_message_size": 2048})
    topic = unique("kept")
    raw = RawClient(broker.mqtt_port, MQTT_5)
    try:
        raw.connect(unique("retainer"))
        raw.send(Publish(topic, b"old", 1, retain=True, packet_id=1))
        assert raw.receive() == PubAck(1)
        too_large = Properties(user_properties=(("k", "v" * 3000),))
        raw.send(Publish(topic, b"refused", 1, retain=True, packet_id=2, properties=too_large))
        answer = raw.receive()
        assert isinstance(answer, PubAck) and answer.reason_code == ReasonCode.UNSPECIFIED_ERROR
    finally:
        raw.close()
    assert retained_for(broker.mqtt_port, topic, MQTT_5, 1) == [(topic, b"old", 1, True)]
