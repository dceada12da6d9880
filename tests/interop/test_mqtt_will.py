"""MQTT Last Will against the real broker process (docs/mqtt.md, Last will): published when a
connection is lost, times out or is taken over, or ends with DISCONNECT 0x04; not after a normal
DISCONNECT; 5.0's Will Delay Interval; Will Retain, Will QoS and Will Properties. paho-mqtt and
gmqtt, 3.1.1 and 5.0, a raw client for what well-behaved clients do not do; the official
pulsar-client reads the will in its topic."""

from __future__ import annotations

import asyncio
import socket
import time

import pulsar
import pytest

from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    MQTT_5,
    Disconnect,
    Properties,
    Publish,
    ReasonCode,
    Subscribe,
    Subscription,
    Will,
)

from ..waiting import eventually
from .mqtt_support import PahoClient, RawClient
from .test_mqtt import VERSIONS, drain, pulsar_name, unique


@pytest.fixture
def mqtt_broker(broker_factory):
    return broker_factory({"mqtt_port": 0})


def watcher(broker, topic: str, version: int = MQTT_5) -> PahoClient:
    paho = PahoClient(broker.mqtt_port, unique("watcher"), version)
    paho.subscribe(topic, 1)
    return paho


def only_marker_after(broker, paho: PahoClient, topic: str) -> list[bytes]:
    """Publish a marker to ``topic`` and return what ``paho`` got up to it (the marker left out)."""
    publisher = PahoClient(broker.mqtt_port, unique("marker"), paho.version)
    try:
        publisher.publish(topic, b"marker", 1)
    finally:
        publisher.close()
    eventually(lambda: paho.received.payloads()[-1:] == [b"marker"], what="the marker")
    return paho.received.payloads()[:-1]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_will_is_published_when_the_connection_is_lost(mqtt_broker, client_factory, version):
    topic = unique("status")
    reader = client_factory(mqtt_broker.service_url).subscribe(pulsar_name(topic), "reader")
    watching = watcher(mqtt_broker, topic, version)
    try:
        client_id = unique("car")
        car = PahoClient(mqtt_broker.mqtt_port, client_id, version, will=(topic, b"offline", 1, False))
        car.drop()  # no DISCONNECT: the network failed
        eventually(lambda: watching.received.payloads() == [b"offline"], what="the will")
    finally:
        watching.close()
    (message,) = drain(reader, 1)
    assert message.data() == b"offline" and message.producer_name() == f"mqtt-{client_id}"


@pytest.mark.parametrize("version", VERSIONS)
def test_no_will_after_a_normal_disconnect(mqtt_broker, version):
    topic = unique("status")
    watching = watcher(mqtt_broker, topic, version)
    try:
        car = PahoClient(mqtt_broker.mqtt_port, unique("car"), version, will=(topic, b"offline", 1, False))
        car.close()  # DISCONNECT (5.0: reason 0x00): the will is discarded
        assert only_marker_after(mqtt_broker, watching, topic) == []
    finally:
        watching.close()


def test_disconnect_with_will_message_publishes_it(mqtt_broker):
    topic = unique("status")
    watching = watcher(mqtt_broker, topic)
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        raw.connect(unique("leaver"), will=Will(topic, b"left, on purpose", 1))
        raw.send(Disconnect(ReasonCode.DISCONNECT_WITH_WILL_MESSAGE))
        eventually(lambda: watching.received.payloads() == [b"left, on purpose"], what="the will")
    finally:
        raw.close()
        watching.close()


@pytest.mark.slow
def test_a_missed_keep_alive_publishes_the_will(mqtt_broker):
    topic = unique("status")
    watching = watcher(mqtt_broker, topic, MQTT_3_1_1)
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_3_1_1)
    try:
        raw.connect(unique("silent"), keep_alive=1, will=Will(topic, b"timed out", 0))
        assert raw.closed_after() == []
        eventually(lambda: watching.received.payloads() == [b"timed out"], what="the will")
    finally:
        raw.close()
        watching.close()


def test_a_taken_over_connection_publishes_its_will(mqtt_broker):
    topic = unique("status")
    watching = watcher(mqtt_broker, topic, MQTT_3_1_1)
    first = RawClient(mqtt_broker.mqtt_port, MQTT_3_1_1)
    second = RawClient(mqtt_broker.mqtt_port, MQTT_3_1_1)
    try:
        first.connect("twin", will=Will(topic, b"replaced", 1))
        second.connect("twin")
        assert first.closed_after() == []
        eventually(lambda: watching.received.payloads() == [b"replaced"], what="the first one's will")
    finally:
        first.close()
        second.close()
        watching.close()


def test_will_retain_qos_and_properties(mqtt_broker, client_factory):
    topic = unique("status")
    reader = client_factory(mqtt_broker.service_url).subscribe(pulsar_name(topic), "reader")
    will_properties = Properties(
        content_type="text/plain",
        response_topic="replies/here",
        correlation_data=b"\x00\x01",
        payload_format_indicator=1,
        user_properties=(("reason", "crash"),),
    )
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    raw.connect(unique("dying"), will=Will(topic, b"gone", 1, retain=True, properties=will_properties))
    raw.close()
    (message,) = drain(reader, 1)
    assert message.data() == b"gone"
    assert message.properties() == {
        "reason": "crash",
        "MQTT_PROPERTIES_1_": "1",
        "MQTT_PROPERTIES_3_": "text/plain",
        "MQTT_PROPERTIES_8_": "replies/here",
        "MQTT_PROPERTIES_9_": "\x00\x01",
        "MQTT_RETAIN": "true",
        "MQTT_QOS": "1",
    }
    # retained: a later subscriber gets it, at the will's QoS, with its properties
    late = PahoClient(mqtt_broker.mqtt_port, unique("late"), MQTT_5)
    try:
        late.subscribe(topic, 2)
        eventually(lambda: late.received.payloads() == [b"gone"], what="the retained will")
        (got,) = late.received.messages
        assert (got[2], got[3], got[4]) == (1, (("reason", "crash"),), True)
        sent = late.received.properties[0]
        assert sent["ContentType"] == "text/plain" and sent["ResponseTopic"] == "replies/here"
        assert sent["CorrelationData"] == "0001" and sent["PayloadFormatIndicator"] == 1
    finally:
        late.close()


@pytest.mark.slow
def test_the_will_delay_holds_the_will_back_and_a_resumed_session_cancels_it(mqtt_broker):
    topic = unique("status")
    watching = watcher(mqtt_broker, topic)
    session = Properties(session_expiry_interval=60)
    delayed = Will(topic, b"delayed", 1, properties=Properties(will_delay_interval=1))
    try:
        # Not back in time: the will goes once the delay has passed.
        raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
        raw.connect("late-comer", clean=False, properties=session, will=delayed)
        raw.close()
        lost = time.monotonic()
        eventually(lambda: watching.received.payloads() == [b"delayed"], what="the delayed will")
        assert time.monotonic() - lost >= 0.9
        # Back in time: the session resumed, the will is not sent.
        raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
        raw.connect(
            "returner",
            clean=False,
            properties=session,
            will=Will(topic, b"never", 1, properties=Properties(will_delay_interval=1)),
        )
        raw.close()
        raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
        assert raw.connect("returner", clean=False, properties=session).session_present
        # The delay passes: a marker then shows nothing came before it.
        deadline = time.monotonic() + 1.5
        eventually(lambda: time.monotonic() > deadline, what="the will delay's end")
        assert only_marker_after(mqtt_broker, watching, topic) == [b"delayed"]
        raw.close()
    finally:
        watching.close()


@pytest.mark.slow
def test_a_session_that_ends_before_the_will_delay_sends_the_will(mqtt_broker):
    topic = unique("status")
    watching = watcher(mqtt_broker, topic)
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        raw.connect(
            "short-session",
            clean=False,
            properties=Properties(session_expiry_interval=1),
            will=Will(topic, b"session over", 1, properties=Properties(will_delay_interval=3600)),
        )
        raw.close()
        eventually(
            lambda: watching.received.payloads() == [b"session over"], what="the will at the session's end"
        )
    finally:
        watching.close()


@pytest.mark.slow
def test_wills_held_back_survive_kill_9(mqtt_broker, client_factory):
    """A will held back by its Will Delay Interval is stored with its session: after a
    ``kill -9`` and a restart it goes when it is due, or when its session ends first, once; a
    session resumed after the restart, before then, cancels it."""
    topics = {name: unique(f"crash/{name}") for name in ("due", "ended", "resumed")}
    held = {
        # client id: (Session Expiry Interval, Will Delay Interval)
        "due": (3600, 4),  # the delay passes first
        "ended": (4, 3600),  # the session ends first
        "resumed": (3600, 3600),  # resumed after the restart
    }
    for name, (expiry, delay) in held.items():
        raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
        raw.connect(
            f"crash-{name}",
            clean=False,
            properties=Properties(session_expiry_interval=expiry),
            will=Will(
                topics[name], f"{name} will".encode(), 1, properties=Properties(will_delay_interval=delay)
            ),
        )
        raw.close()  # the network fails: no DISCONNECT
    for name, (_, delay) in held.items():
        line = f"'crash-{name}': its will is held back {delay} s, stored with its session"
        eventually(lambda line=line: line in mqtt_broker.log_text(), what=f"the {name} will stored")
    assert "its will was published" not in mqtt_broker.log_text()
    mqtt_broker.kill9()
    mqtt_broker.restart(same_port=False)  # nothing holds its URLs
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:  # back before its will is due: the session ends now, and no will goes with it
        connack = raw.connect(
            "crash-resumed", clean=False, properties=Properties(session_expiry_interval=3600)
        )
        assert connack.session_present
        raw.send(Disconnect(properties=Properties(session_expiry_interval=0)))
        assert raw.closed_after() == []
    finally:
        raw.close()
    marker = PahoClient(mqtt_broker.mqtt_port, unique("marker"), MQTT_5)
    client = client_factory(mqtt_broker.service_url)
    try:
        for name in held:
            reader = client.create_reader(pulsar_name(topics[name]), pulsar.MessageId.earliest)
            if name != "resumed":  # published after the restart, once: the marker comes next
                assert reader.read_next(15_000).data() == f"{name} will".encode()
            marker.publish(topics[name], b"marker", 1)
            assert reader.read_next(10_000).data() == b"marker"
            reader.close()
    finally:
        marker.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_gmqtt_will(mqtt_broker, version):
    import gmqtt

    topic = unique("gmqtt/will")
    watching = watcher(mqtt_broker, topic, version)

    async def run() -> None:
        mqtt = gmqtt.Client(unique("gwill"), will_message=gmqtt.Message(topic, b"gmqtt gone", qos=1))
        await mqtt.connect("127.0.0.1", mqtt_broker.mqtt_port, version=version)
        mqtt._connection._transport.abort()  # the network fails: no DISCONNECT
        await asyncio.sleep(0)

    try:
        asyncio.run(run())
        eventually(lambda: watching.received.payloads() == [b"gmqtt gone"], what="gmqtt's will")
    finally:
        watching.close()


def stalled(
    broker,
    client_id: str,
    version: int,
    flood_topic: str,
    client_factory,
    published: str | None = None,
    **connect,
) -> RawClient:
    """A client subscribed to ``flood_topic`` that stopped reading (a half-open link), with more
    output waiting for it than the sockets hold; it ``published`` to that topic first."""
    raw = RawClient(broker.mqtt_port, version)
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect(client_id, **connect)
    if published is not None:
        raw.send(Publish(published, b"from the stalled one", 1, packet_id=1))
        assert raw.receive().packet_id == 1
    raw.send(Subscribe(1, (Subscription(flood_topic, 0),)))
    raw.receive()
    producer = client_factory(broker.service_url).create_producer(pulsar_name(flood_topic))
    for _ in range(60):
        producer.send_async(b"F" * 100_000, None)
    producer.flush()
    return raw


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_a_client_that_stopped_reading_is_let_go_and_its_will_sent(mqtt_broker, client_factory, version):
    """Its keep alive passes while its output waits: the connection is closed and, the client
    taking nothing, aborted; its will goes."""
    topic = unique("status")
    watching = watcher(mqtt_broker, topic, version)
    raw = stalled(
        mqtt_broker,
        unique("stalled"),
        version,
        unique("flood"),
        client_factory,
        keep_alive=1,
        will=Will(topic, b"stalled", 1),
    )
    try:
        eventually(lambda: watching.received.payloads() == [b"stalled"], what="the stalled client's will")
    finally:
        raw.close()
        watching.close()


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_a_connection_taking_over_a_stalled_one_publishes_under_its_producer_name(
    mqtt_broker, client_factory, version
):
    """The connection taken over leaves its topics at once, producers too: the one taking over
    publishes under the same producer name (``mqtt-{client id}``) without waiting for it to end."""
    topic = unique("data")
    client_id = unique("twin")
    reader = client_factory(mqtt_broker.service_url).subscribe(pulsar_name(topic), "reader")
    raw = stalled(mqtt_broker, client_id, version, unique("flood"), client_factory, published=topic)
    try:
        second = PahoClient(mqtt_broker.mqtt_port, client_id, version)
        try:
            second.publish(topic, b"from the second", 1)
        finally:
            second.close()
    finally:
        raw.close()
    assert [m.data() for m in drain(reader, 2)] == [b"from the stalled one", b"from the second"]


@pytest.mark.parametrize("reason", [0x80, 0x83], ids=["unspecified-error", "implementation-specific"])
def test_a_disconnect_with_an_error_publishes_the_will(mqtt_broker, reason):
    """Only DISCONNECT 0x00 discards the will (MQTT-3.14.4-3): a client ending with an error
    reason code leaves it to be published."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.reasoncodes import ReasonCode as PahoReasonCode

    topic = unique("status")
    watching = watcher(mqtt_broker, topic)
    try:
        paho = PahoClient(mqtt_broker.mqtt_port, unique("failing"), MQTT_5, will=(topic, b"failed", 1, False))
        paho.client.disconnect(reasoncode=PahoReasonCode(PacketTypes.DISCONNECT, identifier=reason))
        paho.client.loop_stop()
        eventually(lambda: watching.received.payloads() == [b"failed"], what="the will")
    finally:
        watching.close()


def test_a_will_is_admitted_as_a_publish_is(mqtt_broker, client_factory):
    """The will's producer goes through the topic's admission, as a PUBLISH's does: a topic held
    by an exclusive Pulsar producer refuses it (and it is not stored behind that producer's back)."""
    import pulsar

    topic = unique("held")
    pulsar_client = client_factory(mqtt_broker.service_url)
    reader = pulsar_client.subscribe(pulsar_name(topic), "reader")
    holder = pulsar_client.create_producer(
        pulsar_name(topic), access_mode=pulsar.ProducerAccessMode.Exclusive
    )
    client_id = unique("refused-will")
    paho = PahoClient(mqtt_broker.mqtt_port, client_id, MQTT_5, will=(topic, b"will", 1, False))
    paho.drop()
    eventually(
        lambda: f"MQTT client {client_id!r}: its will to" in mqtt_broker.log_text(), what="the will refused"
    )
    holder.send(b"marker")
    assert [m.data() for m in drain(reader, 1)] == [b"marker"]
