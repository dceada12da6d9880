"""The QoS a subscriber gets, and PUBLISHes stored together, against the real broker process with
paho-mqtt and gmqtt (3.1.1 and 5.0) and the official pulsar-client (docs/mqtt.md).

A message goes to a subscriber at the lower of the QoS it was published with and the QoS the
subscriber was granted (MQTT 3.1.1 3.3.5, 5.0 3.8.4); one from a Pulsar producer (no MQTT QoS) at
the granted QoS. The PUBLISHes of one read of a connection to one topic are stored as one batch
entry, each answered on its own, in order per topic.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    MQTT_5,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    encode,
)

from ..waiting import eventually
from .mqtt_support import PahoClient, RawClient
from .test_mqtt import VERSIONS, drain, nothing_more, pulsar_name, unique


@pytest.fixture
def mqtt_broker(broker_factory):
    return broker_factory({"mqtt_port": 0})


@pytest.fixture
def client(mqtt_broker, client_factory):
    return client_factory(mqtt_broker.service_url)


def received_qos(paho: PahoClient) -> list[tuple[bytes, int]]:
    return [(m[1], m[2]) for m in paho.received.messages]


@pytest.mark.parametrize("version", VERSIONS)
def test_paho_gets_the_lower_of_the_published_and_the_granted_qos(mqtt_broker, version):
    name = unique("qos/paho")
    subscribers = {
        granted: PahoClient(mqtt_broker.mqtt_port, unique(f"sub{granted}"), version) for granted in (0, 1, 2)
    }
    publisher = PahoClient(mqtt_broker.mqtt_port, unique("pub"), version)
    try:
        for granted, subscriber in subscribers.items():
            assert subscriber.subscribe(name, granted) == [granted]
        for qos in (0, 1, 2):
            publisher.publish(name, f"q{qos}".encode(), qos)
        for granted, subscriber in subscribers.items():
            eventually(
                lambda s=subscriber: len(s.received.messages) >= 3, what=f"3 messages at QoS {granted}"
            )
            assert received_qos(subscriber) == [(f"q{qos}".encode(), min(qos, granted)) for qos in (0, 1, 2)]
    finally:
        publisher.close()
        for subscriber in subscribers.values():
            subscriber.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_gmqtt_gets_the_lower_of_the_published_and_the_granted_qos(mqtt_broker, version):
    import gmqtt

    name = unique("qos/gmqtt")

    async def run() -> list[tuple[bytes, int]]:
        got: list[tuple[bytes, int]] = []
        subscribed = asyncio.Event()
        subscriber = gmqtt.Client(unique("gsub"))
        subscriber.on_message = lambda c, topic, payload, qos, properties: got.append((payload, qos)) or 0
        subscriber.on_subscribe = lambda *args: subscribed.set()
        await subscriber.connect("127.0.0.1", mqtt_broker.mqtt_port, version=version)
        subscriber.subscribe(name, qos=2)
        await asyncio.wait_for(subscribed.wait(), 10)
        publisher = gmqtt.Client(unique("gpub"))
        await publisher.connect("127.0.0.1", mqtt_broker.mqtt_port, version=version)
        for qos in (0, 1, 2, 1, 0):
            publisher.publish(name, f"q{qos}".encode(), qos=qos)
        deadline = time.monotonic() + 10
        while len(got) < 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await publisher.disconnect()
        await subscriber.disconnect()
        return got

    assert asyncio.run(run()) == [(f"q{qos}".encode(), qos) for qos in (0, 1, 2, 1, 0)]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_pulsar_producers_message_goes_at_the_granted_qos_unless_it_asks_for_less(
    mqtt_broker, client, version
):
    name = unique("qos/pulsar")
    paho = PahoClient(mqtt_broker.mqtt_port, unique("sub"), version)
    try:
        assert paho.subscribe(name, 2) == [2]
        producer = client.create_producer(pulsar_name(name))
        producer.send(b"plain", properties={"area": "7"})
        producer.send(b"asks for 0", properties={"MQTT_QOS": "0"})
        eventually(lambda: len(paho.received.messages) >= 2, what="two messages")
        # paho hands a QoS 2 message over at PUBREL, after the QoS 0 one that came behind it
        assert sorted(received_qos(paho)) == [(b"asks for 0", 0), (b"plain", 2)]
        if version == MQTT_5:  # MQTT_QOS is no User Property
            assert sorted(m[3] for m in paho.received.messages) == [(), (("area", "7"),)]
    finally:
        paho.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_publishes_of_one_read_share_entries_each_answered_in_order_per_topic(mqtt_broker, client, version):
    """60 QoS 1 PUBLISHes to two topics, a QoS 2 one amid them and (5.0) one refused for its
    payload, in one write: each is answered on its own (the refused one with its reason code),
    each topic has its messages in order, and they share entries (batches)."""
    a, b = unique("batch/a"), unique("batch/b")
    readers = {a: client.subscribe(pulsar_name(a), "r"), b: client.subscribe(pulsar_name(b), "r")}
    raw = RawClient(mqtt_broker.mqtt_port, version)
    raw.connect(unique("raw"))
    data = []
    sent: dict[str, list[bytes]] = {a: [], b: []}
    acks: dict[str, list[int]] = {a: [], b: []}
    for i in range(30):
        for topic, base in ((a, 1), (b, 1001)):
            payload = f"{topic[-8:]}-{i}".encode()
            properties = Properties(user_properties=(("i", str(i)),)) if version == MQTT_5 else Properties()
            data.append(
                encode(Publish(topic, payload, 1, packet_id=base + i, properties=properties), version)
            )
            sent[topic].append(payload)
            acks[topic].append(base + i)
        if i == 10:
            data.append(encode(Publish(a, b"exactly once", 2, packet_id=500), version))
            sent[a].append(b"exactly once")
        if i == 20 and version == MQTT_5:
            bad = Properties(payload_format_indicator=1)  # and a payload that is not UTF-8
            data.append(encode(Publish(a, b"\xff\xfe", 1, packet_id=600, properties=bad), version))
    raw.send_bytes(b"".join(data))
    answers = [raw.receive() for _ in range(60 + 1 + (version == MQTT_5))]
    (pubrec,) = [p for p in answers if isinstance(p, PubRec)]
    assert (pubrec.packet_id, pubrec.reason_code) == (500, 0)
    raw.send(PubRel(500))
    assert raw.receive() == PubComp(500)
    pubacks = [p for p in answers if isinstance(p, PubAck)]
    for topic in (a, b):
        mine = [p for p in pubacks if p.packet_id in acks[topic]]
        assert [(p.packet_id, p.reason_code) for p in mine] == [(i, 0) for i in acks[topic]]  # in order
    if version == MQTT_5:
        (refused,) = [p for p in pubacks if p.packet_id == 600]
        assert refused.reason_code == ReasonCode.PAYLOAD_FORMAT_INVALID
    raw.close()
    for topic, reader in readers.items():
        messages = drain(reader, len(sent[topic]))
        assert [m.data() for m in messages] == sent[topic]
        entries = {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in messages}
        assert len(entries) < len(messages)  # batched: fewer entries than messages
        qos_of = [m.properties()["MQTT_QOS"] for m in messages]
        assert qos_of == ["2" if m.data() == b"exactly once" else "1" for m in messages]
        if version == MQTT_5:
            assert [m.properties()["i"] for m in messages if m.data() != b"exactly once"] == [
                str(i) for i in range(30)
            ]
        assert nothing_more(reader)


def test_a_batch_reaches_mqtt_subscribers_message_by_message(mqtt_broker):
    """A batch entry goes out as its messages: a subscriber gets each once, in order, at its QoS."""
    name = unique("batch/sub")
    subscriber = PahoClient(mqtt_broker.mqtt_port, unique("sub"), MQTT_3_1_1)
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_3_1_1)
    try:
        assert subscriber.subscribe(name, 1) == [1]
        raw.connect(unique("raw"))
        qos_of = [i % 2 for i in range(40)]
        raw.send_bytes(
            b"".join(
                encode(Publish(name, f"m{i}".encode(), qos, packet_id=i + 1 if qos else None), MQTT_3_1_1)
                for i, qos in enumerate(qos_of)
            )
        )
        assert sorted(raw.receive().packet_id for _ in range(20)) == [i + 1 for i in range(40) if qos_of[i]]
        eventually(lambda: len(subscriber.received.messages) >= 40, what="40 messages")
        assert received_qos(subscriber) == [(f"m{i}".encode(), qos) for i, qos in enumerate(qos_of)]
    finally:
        raw.close()
        subscriber.close()
