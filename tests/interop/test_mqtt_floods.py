"""Floods and oversized input on the MQTT port (docs/mqtt.md): a flood of CONNECTs from one
address, connections past the broker's limits, packets past the maximum packet size, large
packets waiting for memory, garbage. Each is answered as the standard says and costs only its
sender: a client on another address goes on publishing, and what it stored reads back whole."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid

import pytest

from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    MQTT_5,
    ConnAck,
    MqttDecoder,
    PubAck,
    Publish,
    ReasonCode,
    encode,
)
from magnetar.protocol.mqtt.primitives import varint
from magnetar.protocol.mqtt.pulsar_names import pulsar_topic

from ..waiting import eventually
from .mqtt_support import PahoClient, RawClient
from .support import labelled, scrape

R = ReasonCode
SERVER_UNAVAILABLE_3_1_1 = 3
#: First bytes no packet may have: type 0 (reserved), and types with flags they must not carry.
BROKEN_FIRST_BYTES = [0x00, 0x11, 0x36, 0x80, 0xA0, 0xC1, 0xE3, 0xF1]
#: The address floods come from; everyone else is on 127.0.0.1 (all of 127.0.0.0/8 is this host).
FLOODER = "127.0.0.2"


def pulsar_name(mqtt_name: str) -> str:
    return str(pulsar_topic(mqtt_name, "public", "default"))


def unique(prefix: str) -> str:
    return f"{prefix}/{uuid.uuid4().hex[:8]}"


class AddressedClient(RawClient):
    """The raw client, connecting from ``source`` (a loopback address of its own)."""

    def __init__(self, port: int, version: int = MQTT_5, source: str = FLOODER) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
        self.version = version
        self.decoder = MqttDecoder(version=version)


class Steady:
    """A client on 127.0.0.1 publishing at QoS 1 on a thread until stopped: what it got acknowledged."""

    def __init__(self, port: int, name: str) -> None:
        self.paho = PahoClient(port, f"steady-{uuid.uuid4().hex[:6]}", MQTT_5)
        self.name = name
        self.sent: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            payload = f"steady-{i}".encode()
            self.paho.publish(self.name, payload, 1)  # waits for its PUBACK
            self.sent.append(payload)
            i += 1

    def stop(self) -> list[bytes]:
        self._stop.set()
        self._thread.join(30)
        self.paho.close()
        return self.sent


def metric(broker, name: str) -> float:
    return sum(value for (sample, _), value in scrape(broker).items() if sample == name)


def read_back(client_factory, broker, name: str) -> list[bytes]:
    import pulsar

    reader = client_factory(broker.service_url).create_reader(pulsar_name(name), pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(10_000).data())
    return out


# -- CONNECT floods ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_connect_flood_from_one_address_is_refused_and_nobody_else_is_affected(
    broker_factory, client_factory
):
    broker = broker_factory({"mqtt_port": 0, "mqtt_max_connect_rate_per_ip": 20})
    port = broker.mqtt_port
    name = unique("flood/steady")
    steady = Steady(port, name)
    answers: dict[int, list[int]] = {MQTT_3_1_1: [], MQTT_5: []}
    started = time.monotonic()
    try:
        for i in range(300):
            version = MQTT_5 if i % 2 else MQTT_3_1_1
            raw = AddressedClient(port, version)
            try:
                connack = raw.connect(f"flood-{i}")
                answers[version].append(connack.reason_code)
            finally:
                raw.close()
        elapsed = time.monotonic() - started
        eventually(lambda: len(steady.sent) >= 5, what="the steady client publishing")
        # someone else on another address connects at once
        other = PahoClient(port, "bystander", MQTT_3_1_1)
        other.publish(unique("flood/other"), b"fine", 1)
        other.close()
    finally:
        sent = steady.stop()
    admitted = answers[MQTT_3_1_1].count(0) + answers[MQTT_5].count(0)
    assert 20 <= admitted <= 20 + 20 * elapsed + 1  # the burst, then 20 a second
    assert set(answers[MQTT_5]) <= {0, R.CONNECTION_RATE_EXCEEDED}
    assert set(answers[MQTT_3_1_1]) <= {0, SERVER_UNAVAILABLE_3_1_1}
    assert R.CONNECTION_RATE_EXCEEDED in answers[MQTT_5]
    assert read_back(client_factory, broker, name) == sent  # every acknowledged message, in order
    refused = labelled(broker, "magnetar_limit_refusals_total", "limit")["mqtt_max_connect_rate_per_ip"]
    assert refused == 300 - admitted


@pytest.mark.slow
def test_connections_past_the_broker_limits_are_refused_at_connect(broker_factory):
    broker = broker_factory({"mqtt_port": 0, "broker_max_connections_per_ip": 2})
    port = broker.mqtt_port
    held = [AddressedClient(port, MQTT_5) for _ in range(2)]
    try:
        assert [c.connect(f"held-{i}").reason_code for i, c in enumerate(held)] == [0, 0]
        third = AddressedClient(port, MQTT_5)
        connack = third.connect("third")
        assert connack.reason_code == R.QUOTA_EXCEEDED
        assert "maximum number of connections on address 127.0.0.2" in connack.properties.reason_string
        assert third.closed_after() == []
        fourth = AddressedClient(port, MQTT_3_1_1)
        assert fourth.connect("fourth") == ConnAck(False, SERVER_UNAVAILABLE_3_1_1)
        bystander = RawClient(port, MQTT_5)  # 127.0.0.1 has its own count
        assert bystander.connect("bystander").reason_code == 0
        bystander.close()
        held.pop().close()

        def admitted() -> bool:
            again = AddressedClient(port, MQTT_5)
            try:
                return again.connect("again").reason_code == 0
            finally:
                again.close()

        eventually(admitted, what="a connection once one closed")
    finally:
        for client in held:
            client.close()


# -- oversized and broken packets -------------------------------------------------------------------
@pytest.mark.slow
def test_packets_past_the_maximum_packet_size(broker_factory, client_factory):
    """5.0: CONNACK or DISCONNECT 0x95 Packet too large, with the reason; 3.1.1: closed. Decided
    from the fixed header, before the bytes are taken in; stored messages are untouched."""
    broker = broker_factory({"mqtt_port": 0, "mqtt_message_max_length": 64 * 1024})
    port = broker.mqtt_port
    name = unique("oversized")
    paho = PahoClient(port, "oversized-steady", MQTT_5)
    try:
        paho.publish(name, b"before", 1)
        # a CONNECT over the 256 KiB allowed before CONNECT, in each version
        for version in (MQTT_5, MQTT_3_1_1):
            raw = RawClient(port, version)
            # a fixed header saying 300 KiB, then the start of a CONNECT of that level
            raw.send_bytes(b"\x10" + varint(300 * 1024) + b"\x00\x04MQTT" + bytes([version, 2, 0, 60]))
            answers = raw.closed_after()
            if version == MQTT_5:
                assert [type(a) for a in answers] == [ConnAck]
                assert answers[0].reason_code == R.PACKET_TOO_LARGE
            else:
                assert answers == []
            raw.close()
        # a PUBLISH over mqtt_message_max_length after CONNECT
        for version in (MQTT_5, MQTT_3_1_1):
            raw = RawClient(port, version)
            raw.connect(f"big-publish-{version}")
            raw.send_bytes(b"\x32" + varint(70 * 1024))
            answers = raw.closed_after()
            if version == MQTT_5:
                assert [a.reason_code for a in answers] == [R.PACKET_TOO_LARGE]
                assert "over the maximum packet size of 65536" in answers[0].properties.reason_string
            else:
                assert answers == []
            raw.close()
        paho.publish(name, b"after", 1)
    finally:
        paho.close()
    assert read_back(client_factory, broker, name) == [b"before", b"after"]


@pytest.mark.slow
def test_garbage_from_many_connections_costs_only_theirs(broker_factory, client_factory):
    broker = broker_factory({"mqtt_port": 0})
    port = broker.mqtt_port
    name = unique("garbage/steady")
    steady = Steady(port, name)
    rng = __import__("random").Random(7)
    try:
        for i in range(60):
            raw = AddressedClient(port, MQTT_5 if i % 2 else MQTT_3_1_1)
            if i % 3:
                raw.connect(f"garbage-{i}")
            # a whole packet of random bytes whose first byte breaks the standard (reserved type,
            # flags a packet may not have): malformed, whatever follows
            body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
            raw.send_bytes(bytes([rng.choice(BROKEN_FIRST_BYTES)]) + varint(len(body)) + body)
            raw.closed_after()  # each is closed (or answered, then closed)
            raw.close()
        eventually(lambda: len(steady.sent) >= 3, what="the steady client publishing")
    finally:
        sent = steady.stop()
    assert read_back(client_factory, broker, name) == sent


# -- large packets wait for memory --------------------------------------------------------------------
@pytest.mark.slow
def test_a_large_packet_waits_for_memory_and_a_stalled_one_is_closed(broker_factory, client_factory):
    """With room for one 1.5 MiB packet at a time (max_incomplete_frame_bytes), a second waits
    unread until the first is whole, then is stored too; one that stalls while another waits
    loses its connection (DISCONNECT 0x97) after incomplete_frame_timeout_seconds."""
    broker = broker_factory(
        {"mqtt_port": 0, "max_incomplete_frame_bytes": 2 * 1024 * 1024, "incomplete_frame_timeout_seconds": 2}
    )
    port = broker.mqtt_port
    name = unique("room")
    size = 1536 * 1024
    payloads = [os.urandom(size), os.urandom(size)]
    first, second = RawClient(port), RawClient(port)
    try:
        first.connect("first")
        second.connect("second")
        data = [encode(Publish(name, p, 1, packet_id=1), MQTT_5) for p in payloads]
        first.send_bytes(data[0][: len(data[0]) // 2])  # holds its room, half sent
        eventually(lambda: metric(broker, "magnetar_incomplete_frames_bytes") == len(data[0]), what="room")
        sender = threading.Thread(target=second.send_bytes, args=(data[1],), daemon=True)
        sender.start()  # blocks once the socket buffers fill: the broker does not read it
        eventually(
            lambda: metric(broker, "magnetar_incomplete_frames_waiting") == 1, what="the second waiting"
        )
        first.send_bytes(data[0][len(data[0]) // 2 :])
        assert first.receive() == PubAck(1)
        assert second.receive(timeout=20) == PubAck(1)
        sender.join(10)
        # now one stalls while another waits
        stalled, waiting = RawClient(port), RawClient(port)
        stalled.connect("stalled")
        waiting.connect("waiting")
        big = encode(Publish(name, os.urandom(size), 1, packet_id=2), MQTT_5)
        stalled.send_bytes(big[:1000])
        eventually(lambda: metric(broker, "magnetar_incomplete_frames_bytes") == len(big), what="room")
        threading.Thread(target=waiting.send_bytes, args=(big,), daemon=True).start()
        (answer,) = stalled.closed_after(timeout=15)
        assert answer.reason_code == R.QUOTA_EXCEEDED
        assert waiting.receive(timeout=20) == PubAck(2)
        stalled.close()
        waiting.close()
    finally:
        first.close()
        second.close()
    stored = read_back(client_factory, broker, name)
    assert stored[:2] == payloads and len(stored) == 3
