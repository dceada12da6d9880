"""Large MQTT messages (docs/mqtt.md): up to max_message_size as one entry, beyond it stored in
chunks (PIP 37) that the official pulsar-client reassembles; a chunked message a Pulsar producer
wrote reaches MQTT subscribers whole (put together in the broker). paho-mqtt and gmqtt, 3.1.1
and 5.0, against the real broker process."""

from __future__ import annotations

import asyncio
import os
import uuid

import pulsar
import pytest

from magnetar.client.admin import AdminClient
from magnetar.protocol.mqtt import MQTT_3_1_1, MQTT_5, PubAck, PubComp, Publish, PubRec, PubRel
from magnetar.protocol.mqtt.pulsar_names import pulsar_topic

from ..waiting import eventually
from .mqtt_support import PahoClient, RawClient

VERSIONS = [pytest.param(MQTT_3_1_1, id="3.1.1"), pytest.param(MQTT_5, id="5.0")]
MIB = 1024 * 1024
#: A broker whose messages are cut at 256 KiB: a message of a few hundred KiB is already chunked.
SMALL = {"mqtt_port": 0, "max_message_size": 256 * 1024}


def pulsar_name(mqtt_name: str) -> str:
    return str(pulsar_topic(mqtt_name, "public", "default"))


def unique(prefix: str) -> str:
    return f"{prefix}/{uuid.uuid4().hex[:8]}"


def stored_entries(broker, topic: str) -> int:
    """Entries the topic holds (one per chunk): its internal stats."""
    return int(AdminClient(broker.http_url).topics.internal_stats(topic)["numberOfEntries"])


@pytest.mark.slow
def test_a_10_mb_camera_frame_over_mqtt_reaches_the_pulsar_consumer_whole(broker_factory, client_factory):
    broker = broker_factory({"mqtt_port": 0})  # max_message_size: 5 MiB, the default
    name = unique("camera/frame")
    client = client_factory(broker.service_url, operation_timeout_seconds=30)
    consumer = client.subscribe(pulsar_name(name), "vision")
    frame = os.urandom(10 * MIB)
    camera = PahoClient(broker.mqtt_port, "camera-7", MQTT_5)
    try:
        camera.publish(name, frame, 1, [("format", "jpeg")])
        camera.publish(name, b"small", 1)
    finally:
        camera.close()
    whole = consumer.receive(30_000)
    assert whole.data() == frame
    assert whole.properties() == {"format": "jpeg", "MQTT_QOS": "1"}
    assert whole.producer_name() == "mqtt-camera-7"
    consumer.acknowledge(whole)
    assert consumer.receive(10_000).data() == b"small"


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_messages_up_to_and_past_max_message_size(broker_factory, client_factory, version):
    """A message that fits is one entry; one past the limit is chunked, and read whole."""
    broker = broker_factory(SMALL)
    name = unique("large/paho")
    client = client_factory(broker.service_url)
    consumer = client.subscribe(pulsar_name(name), "reader")
    fits = os.urandom(200 * 1024)
    past = os.urandom(700 * 1024)
    paho = PahoClient(broker.mqtt_port, f"large-{version}", version)
    try:
        for qos in (0, 1, 2):
            paho.publish(name, fits, qos)
            paho.publish(name, past, qos)
    finally:
        paho.close()
    got = [consumer.receive(10_000).data() for _ in range(6)]
    assert got == [fits, past] * 3
    assert stored_entries(broker, pulsar_name(name)) == 3 * (1 + 3)  # 700 KiB: three chunks


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_gmqtt_large_message(broker_factory, client_factory, version):
    import gmqtt

    broker = broker_factory(SMALL)
    name = unique("large/gmqtt")
    consumer = client_factory(broker.service_url).subscribe(pulsar_name(name), "reader")
    payload = os.urandom(600 * 1024)

    async def run() -> bytes:
        mqtt = gmqtt.Client(f"gmqtt-large-{version}")
        await mqtt.connect("127.0.0.1", broker.mqtt_port, version=version)
        mqtt.publish(name, payload, qos=1)
        data = await asyncio.to_thread(lambda: consumer.receive(10_000).data())
        await mqtt.disconnect()
        return data

    assert asyncio.run(run()) == payload


# -- Pulsar chunked messages to MQTT subscribers ---------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_a_chunked_pulsar_message_reaches_mqtt_subscribers_whole(
    broker_factory, client_factory, version, qos
):
    broker = broker_factory(SMALL)
    name = unique("large/to-mqtt")
    paho = PahoClient(broker.mqtt_port, f"chunk-sub-{version}-{qos}", version)
    try:
        assert paho.subscribe(name, qos) == [qos]
        client = client_factory(broker.service_url)
        producer = client.create_producer(pulsar_name(name), chunking_enabled=True, batching_enabled=False)
        big = os.urandom(900 * 1024)
        producer.send(b"before")
        producer.send(big, properties={"kind": "frame"})
        producer.send(b"after")
        eventually(lambda: len(paho.received.messages) >= 3, what="three messages", timeout=20)
        assert paho.received.payloads() == [b"before", big, b"after"]
        expected = (("kind", "frame"),) if version == MQTT_5 else ()
        assert paho.received.messages[1][3] == expected
    finally:
        paho.close()


def test_compressed_chunked_messages_from_two_producers_interleaved(broker_factory, client_factory):
    """Chunks of two producers' messages interleave in the topic; each message arrives whole."""
    broker = broker_factory(SMALL)
    name = unique("large/two")
    paho = PahoClient(broker.mqtt_port, "chunk-two", MQTT_5)
    try:
        paho.subscribe(name, 1)
        client = client_factory(broker.service_url)
        producers = [
            client.create_producer(
                pulsar_name(name),
                chunking_enabled=True,
                batching_enabled=False,
                compression_type=pulsar.CompressionType.LZ4,
            )
            for _ in range(2)
        ]
        payloads = [os.urandom(400 * 1024) + bytes(300 * 1024) for _ in range(4)]  # half compressible
        for i, payload in enumerate(payloads):
            producers[i % 2].send_async(payload, None)
        for producer in producers:
            producer.flush()
        eventually(lambda: len(paho.received.messages) >= 4, what="four messages", timeout=20)
        assert sorted(paho.received.payloads()) == sorted(payloads)
    finally:
        paho.close()


def test_an_mqtt_chunked_message_reaches_mqtt_subscribers_whole(broker_factory):
    broker = broker_factory(SMALL)
    name = unique("large/mqtt-mqtt")
    subscriber = PahoClient(broker.mqtt_port, "big-sub", MQTT_3_1_1)
    publisher = PahoClient(broker.mqtt_port, "big-pub", MQTT_5)
    try:
        subscriber.subscribe(name, 2)
        payload = os.urandom(MIB)
        publisher.publish(name, payload, 2)
        eventually(lambda: subscriber.received.payloads() == [payload], what="the large message")
    finally:
        subscriber.close()
        publisher.close()


# -- exactly once, and limits ----------------------------------------------------------------------------
def test_a_large_qos2_message_sent_again_is_stored_once(broker_factory, client_factory):
    broker = broker_factory(SMALL)
    name = unique("large/once")
    payload = os.urandom(700 * 1024)  # three chunks
    raw = RawClient(broker.mqtt_port, MQTT_5)
    try:
        assert raw.connect("large-once").reason_code == 0
        raw.send(Publish(name, payload, 2, packet_id=5))
        assert raw.receive() == PubRec(5)
        raw.send(Publish(name, payload, 2, dup=True, packet_id=5))
        assert raw.receive() == PubRec(5)
        raw.send(PubRel(5))
        assert raw.receive() == PubComp(5)
        raw.send(Publish(name, b"next", 1, packet_id=6))
        assert raw.receive() == PubAck(6)
    finally:
        raw.close()
    client = client_factory(broker.service_url)
    reader = client.create_reader(pulsar_name(name), pulsar.MessageId.earliest)
    assert reader.read_next(10_000).data() == payload
    assert reader.read_next(10_000).data() == b"next"
    assert not reader.has_message_available()
    assert stored_entries(broker, pulsar_name(name)) == 4  # the three chunks once, "next"


def test_a_packet_over_mqtt_message_max_length_is_refused(broker_factory, client_factory):
    broker = broker_factory({**SMALL, "mqtt_message_max_length": MIB})
    name = unique("large/over")
    raw = RawClient(broker.mqtt_port, MQTT_5)
    try:
        connack = raw.connect("over")
        assert connack.properties.maximum_packet_size == MIB
        raw.send(Publish(name, os.urandom(MIB), 1, packet_id=1))
        answers = raw.closed_after()
        assert [a.reason_code for a in answers] == [0x95]  # Packet too large
    finally:
        raw.close()
    client = client_factory(broker.service_url)
    reader = client.create_reader(pulsar_name(name), pulsar.MessageId.earliest)
    assert not reader.has_message_available()
