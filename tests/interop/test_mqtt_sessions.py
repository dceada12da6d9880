"""MQTT persistent sessions against the real broker process (docs/mqtt.md, Sessions): a client
that connects without Clean Start gets its subscriptions back, and the QoS 1 and 2 messages it
missed, from durable Pulsar subscriptions named after its client id; also after a broker restart
and a kill -9. paho-mqtt and gmqtt, 3.1.1 and 5.0; the official pulsar-client writes what the
clients missed and reads the admin API's view of their subscriptions."""

from __future__ import annotations

import asyncio
import time
import urllib.parse

import pytest
from paho.mqtt.client import MQTT_ERR_SUCCESS

from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    MQTT_5,
    ConnAck,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    Publish,
    PubRec,
    PubRel,
    Subscribe,
)
from magnetar.protocol.mqtt.packets import PubComp, Subscription

from ..waiting import eventually
from .mqtt_support import PahoClient, RawClient
from .support import admin_call
from .test_mqtt import VERSIONS, pulsar_name, unique

#: 5.0's Session Expiry Interval for "a while" (3.1.1 sessions without Clean Session never expire).
HOUR = 3600


@pytest.fixture
def mqtt_broker(broker_factory):
    return broker_factory({"mqtt_port": 0})


def subscriptions_of(broker, mqtt_name: str) -> list[str]:
    """The Pulsar subscriptions of the topic an MQTT Topic Name maps to (admin API)."""
    local = pulsar_name(mqtt_name).split("/", 5)[-1]
    status, body = admin_call(
        broker,
        "GET",
        f"/admin/v2/persistent/public/default/{urllib.parse.quote(local, safe='')}/subscriptions",
    )
    assert status == 200, body
    return sorted(body)


def persistent(port: int, client_id: str, version: int, expiry: int = HOUR) -> PahoClient:
    """A paho client of a session that outlives its connection."""
    return PahoClient(
        port, client_id, version, clean=False, session_expiry=expiry if version == MQTT_5 else None
    )


def send(client, name: str, payloads: list[bytes]) -> None:
    producer = client.create_producer(pulsar_name(name))
    for payload in payloads:
        producer.send(payload)
    producer.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_persistent_session_gets_its_subscriptions_and_what_it_missed(mqtt_broker, client_factory, version):
    name = unique("fleet/car")
    client_id = f"car-{version}"
    paho = persistent(mqtt_broker.mqtt_port, client_id, version)
    try:
        assert paho.session_present is False
        assert paho.subscribe(name, 1) == [1]
    finally:
        paho.close()
    # The session's durable subscription, named after the client id as Pulsar's MQTT handler does.
    assert subscriptions_of(mqtt_broker, name) == [client_id]
    pulsar_client = client_factory(mqtt_broker.service_url)
    send(pulsar_client, name, [f"missed-{i}".encode() for i in range(5)])
    paho = persistent(mqtt_broker.mqtt_port, client_id, version)  # no SUBSCRIBE this time
    try:
        assert paho.session_present is True
        eventually(lambda: len(paho.received.messages) >= 5, what="the five missed messages")
        assert paho.received.payloads() == [f"missed-{i}".encode() for i in range(5)]
        send(pulsar_client, name, [b"live"])
        eventually(lambda: paho.received.payloads()[-1:] == [b"live"], what="a message sent while connected")
    finally:
        paho.close()
    assert len(paho.received.messages) == 6


@pytest.mark.slow
@pytest.mark.parametrize("crash", [False, True], ids=["restart", "kill-9"])
@pytest.mark.parametrize("version", VERSIONS)
def test_a_persistent_session_survives_a_broker_restart(mqtt_broker, client_factory, version, crash):
    name = unique("depot")
    wild = unique("yard")
    client_id = f"survivor-{version}-{crash}"
    paho = persistent(mqtt_broker.mqtt_port, client_id, version)
    try:
        assert paho.subscribe(name, 2) == [2]
        assert paho.subscribe(f"{wild}/+/gate", 1) == [1]
    finally:
        paho.close()
    if crash:
        mqtt_broker.kill9()
    else:
        mqtt_broker.stop()
    mqtt_broker.restart()
    pulsar_client = client_factory(mqtt_broker.service_url)
    send(pulsar_client, name, [b"after-restart-1", b"after-restart-2"])
    send(pulsar_client, f"{wild}/north/gate", [b"a topic made while the client was away"])
    paho = persistent(mqtt_broker.mqtt_port, client_id, version)
    try:
        assert paho.session_present is True
        eventually(lambda: len(paho.received.messages) >= 3, what="what the client missed")
        got = sorted((m[0], m[1], m[2]) for m in paho.received.messages)
        assert got == sorted(
            [
                (name, b"after-restart-1", 2),
                (name, b"after-restart-2", 2),
                (f"{wild}/north/gate", b"a topic made while the client was away", 1),
            ]
        )
    finally:
        paho.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_gmqtt_persistent_session(mqtt_broker, client_factory, version):
    import gmqtt

    name = unique("gmqtt/persist")
    client_id = f"gmqtt-persist-{version}"
    expiry = {"session_expiry_interval": HOUR} if version == MQTT_5 else {}
    pulsar_client = client_factory(mqtt_broker.service_url)

    async def connect(got: list, present: list) -> gmqtt.Client:
        mqtt = gmqtt.Client(client_id, clean_session=False, **expiry)
        mqtt.on_message = lambda c, topic, payload, qos, properties: got.append(payload) or 0
        mqtt.on_connect = lambda c, flags, rc, properties: present.append(bool(flags))
        await mqtt.connect("127.0.0.1", mqtt_broker.mqtt_port, version=version)
        return mqtt

    async def run() -> tuple[list, list]:
        got: list = []
        present: list = []
        subscribed = asyncio.Event()
        mqtt = await connect(got, present)
        mqtt.on_subscribe = lambda *args: subscribed.set()
        mqtt.subscribe(name, qos=1)
        await asyncio.wait_for(subscribed.wait(), 10)
        await mqtt.disconnect()
        await asyncio.to_thread(send, pulsar_client, name, [b"g1", b"g2", b"g3"])
        mqtt = await connect(got, present)
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await mqtt.disconnect()
        return got, present

    got, present = asyncio.run(run())
    assert got == [b"g1", b"g2", b"g3"]
    assert present == [False, True]


@pytest.mark.parametrize("version", VERSIONS)
def test_clean_start_ends_a_persistent_session(mqtt_broker, client_factory, version):
    name = unique("clean")
    client_id = f"cleaner-{version}"
    paho = persistent(mqtt_broker.mqtt_port, client_id, version)
    try:
        paho.subscribe(name, 1)
    finally:
        paho.close()
    assert subscriptions_of(mqtt_broker, name) == [client_id]
    send(client_factory(mqtt_broker.service_url), name, [b"kept for the old session"])
    paho = PahoClient(mqtt_broker.mqtt_port, client_id, version, clean=True)
    try:
        assert paho.session_present is False
        # The old session's durable subscription (and its backlog) went before the CONNACK.
        assert subscriptions_of(mqtt_broker, name) == []
        paho.subscribe(f"{name}-marker", 0)  # answered after anything the old session would get
        assert paho.received.messages == []
    finally:
        paho.close()


def test_unsubscribe_deletes_the_durable_subscription(mqtt_broker):
    name = unique("unsub-durable")
    paho = persistent(mqtt_broker.mqtt_port, "unsubscriber", MQTT_5)
    try:
        paho.subscribe(name, 1)
        paho.subscribe(f"{name}/#", 1)
        assert subscriptions_of(mqtt_broker, name) == ["unsubscriber"]
        paho.unsubscribe(name)  # "name/#" still matches "name": kept
        assert subscriptions_of(mqtt_broker, name) == ["unsubscriber"]
        paho.unsubscribe(f"{name}/#")
        assert subscriptions_of(mqtt_broker, name) == []
    finally:
        paho.close()


@pytest.mark.slow
def test_session_expiry_removes_the_session_and_its_subscriptions(mqtt_broker):
    name = unique("expiring")
    paho = persistent(mqtt_broker.mqtt_port, "short-lived", MQTT_5, expiry=1)
    try:
        paho.subscribe(name, 1)
    finally:
        paho.close()
    assert subscriptions_of(mqtt_broker, name) == ["short-lived"]
    eventually(lambda: subscriptions_of(mqtt_broker, name) == [], what="the session's expiry")
    paho = persistent(mqtt_broker.mqtt_port, "short-lived", MQTT_5)
    try:
        assert paho.session_present is False
    finally:
        paho.close()


@pytest.mark.slow
def test_session_expiry_counts_across_a_restart(mqtt_broker):
    name = unique("expiring-restart")
    paho = persistent(mqtt_broker.mqtt_port, "expires-while-down", MQTT_5, expiry=2)
    try:
        paho.subscribe(name, 1)
    finally:
        paho.close()
    keeper = persistent(mqtt_broker.mqtt_port, "keeper", MQTT_5, expiry=HOUR)
    try:
        keeper.subscribe(name, 1)
    finally:
        keeper.close()
    mqtt_broker.kill9()
    mqtt_broker.restart()
    eventually(lambda: subscriptions_of(mqtt_broker, name) == ["keeper"], what="the expiry after the restart")
    expiry = Properties(session_expiry_interval=HOUR)
    for client_id, present in (("expires-while-down", False), ("keeper", True)):
        raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
        try:
            assert raw.connect(client_id, clean=False, properties=expiry).session_present is present
        finally:
            raw.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_unacknowledged_messages_come_again_under_their_packet_identifiers(
    mqtt_broker, client_factory, version
):
    """4.4: a resumed session gets its unacknowledged PUBLISH again with DUP and the same packet
    identifier, and its unanswered PUBREL again."""
    name = unique("again")
    expiry = Properties(session_expiry_interval=HOUR) if version == MQTT_5 else Properties()
    raw = RawClient(mqtt_broker.mqtt_port, version)
    raw.connect("forgetful", clean=False, properties=expiry)
    raw.send(Subscribe(1, (Subscription(name, 1), Subscription(f"{name}/two", 2)), Properties()))
    raw.receive()  # SUBACK
    pulsar_client = client_factory(mqtt_broker.service_url)
    send(pulsar_client, name, [b"one"])
    first = raw.receive()
    assert isinstance(first, Publish) and first.payload == b"one" and not first.dup
    send(pulsar_client, f"{name}/two", [b"two"])
    second = raw.receive()
    assert isinstance(second, Publish) and second.qos == 2
    raw.send(PubRec(second.packet_id))
    assert raw.receive() == PubRel(second.packet_id)
    raw.close()  # no PUBACK of "one", no PUBCOMP of "two"
    raw = RawClient(mqtt_broker.mqtt_port, version)
    try:
        assert raw.connect("forgetful", clean=False, properties=expiry).session_present is True
        answers = [raw.receive(), raw.receive()]
        assert PubRel(second.packet_id) in answers
        (again,) = [p for p in answers if isinstance(p, Publish)]
        assert (again.payload, again.packet_id, again.dup) == (b"one", first.packet_id, True)
        raw.send(PubAck(again.packet_id))
        raw.send(PubComp(second.packet_id))
        send(pulsar_client, name, [b"three"])
        third = raw.receive()
        assert isinstance(third, Publish) and third.payload == b"three" and not third.dup
    finally:
        raw.close()


@pytest.mark.slow
@pytest.mark.parametrize("stopped", ["while-connected", "while-away", "kill-9"])
def test_packet_identifiers_in_flight_survive_a_broker_restart(mqtt_broker, client_factory, stopped):
    """4.4 across a restart: the broker stopped (SIGTERM) while the session's connection is open,
    or after it closed, stores what it has in flight; resumed after the restart, the session gets
    its unacknowledged PUBLISH again with DUP and the same packet identifier, and its unanswered
    PUBREL again. A PUBREL goes once the session's record holds it: after a ``kill -9`` under
    the open connection it goes again too (the unacknowledged QoS 1 PUBLISH comes again, under a
    new identifier; a QoS 2 one under its own: the next test)."""
    name = unique("restart-again")
    expiry = Properties(session_expiry_interval=HOUR)
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    raw.connect("restarted", clean=False, properties=expiry)
    raw.send(Subscribe(1, (Subscription(name, 1), Subscription(f"{name}/two", 2)), Properties()))
    raw.receive()  # SUBACK
    pulsar_client = client_factory(mqtt_broker.service_url)
    send(pulsar_client, name, [b"one"])
    first = raw.receive()
    assert isinstance(first, Publish) and first.payload == b"one" and not first.dup
    send(pulsar_client, f"{name}/two", [b"two"])
    second = raw.receive()
    assert isinstance(second, Publish) and second.qos == 2
    raw.send(PubRec(second.packet_id))
    assert raw.receive() == PubRel(second.packet_id)
    pulsar_client.close()
    if stopped == "while-away":
        raw.close()  # no PUBACK of "one", no PUBCOMP of "two"
    if stopped == "kill-9":
        mqtt_broker.kill9()
    else:
        mqtt_broker.stop()
    raw.close()
    mqtt_broker.restart(same_port=False)  # nothing holds its URLs
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        assert raw.connect("restarted", clean=False, properties=expiry).session_present is True
        answers = [raw.receive(), raw.receive()]
        assert PubRel(second.packet_id) in answers
        (again,) = [p for p in answers if isinstance(p, Publish)]
        if stopped == "kill-9":
            assert again.payload == b"one" and again.packet_id != second.packet_id
        else:
            assert (again.payload, again.packet_id, again.dup) == (b"one", first.packet_id, True)
        raw.send(PubAck(again.packet_id))
        raw.send(PubComp(second.packet_id))
        pulsar_client = client_factory(mqtt_broker.service_url)
        send(pulsar_client, name, [b"three"])
        third = raw.receive()
        assert isinstance(third, Publish) and third.payload == b"three" and not third.dup
        raw.send(PubAck(third.packet_id))
    finally:
        raw.close()


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_a_qos_2_message_the_client_holds_comes_again_under_its_identifier_after_a_kill_9(
    mqtt_broker, client_factory, version
):
    """4.4 across a ``kill -9`` under the open connection: a QoS 2 message the client took and
    has not answered (paho's PUBREC held back here: a client that does not answer) comes again
    after the restart with DUP under the packet identifier it had, as the session's record held
    it before the PUBLISH went. paho keeps such a message until its PUBREL and hands it to the
    application then: once, the copy sent again taking the first one's place (under a new
    identifier both would be kept, two messages). The message after it comes as a new one."""
    name = unique("held-qos2")
    client = persistent(mqtt_broker.mqtt_port, f"holding-{version}", version)
    taken: list[int] = []  # the packet identifiers paho would have answered with PUBREC
    delivered: list[tuple[bytes, int, bool]] = []  # what reached the application: payload, mid, DUP
    client.client.on_message = lambda c, u, message: delivered.append(
        (message.payload, message.mid, bool(message.dup))
    )
    try:
        client.subscribe(name, 2)
        pulsar_client = client_factory(mqtt_broker.service_url)
        send(pulsar_client, name, [b"first"])  # answered: the next one's identifier is not the first
        eventually(lambda: delivered, what="the first message")
        client.client._send_pubrec = lambda mid: taken.append(mid) or MQTT_ERR_SUCCESS
        send(pulsar_client, name, [b"held"])
        eventually(lambda: taken, what="the QoS 2 PUBLISH taken, unanswered")
        pulsar_client.close()
        mqtt_broker.kill9()
        del client.client._send_pubrec  # it answers again
        mqtt_broker.restart(same_port=False)
        client.reconnect(mqtt_broker.mqtt_port)
        assert client.session_present is True
        eventually(lambda: len(delivered) == 2, what="the held message handed to the application")
        assert taken[0] != delivered[0][1] and delivered[1] == (b"held", taken[0], True)
        pulsar_client = client_factory(mqtt_broker.service_url)
        send(pulsar_client, name, [b"after"])
        eventually(lambda: len(delivered) == 3, what="the message after it")
        assert [payload for payload, _, _ in delivered] == [b"first", b"held", b"after"]
        assert delivered[2][2] is False
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.parametrize("answered", ["pubrec", "pubcomp"])
def test_a_qos_2_message_the_client_received_is_not_sent_again_after_a_kill_9(
    broker_factory, client_factory, answered
):
    """4.3.3 across a kill -9: a QoS 2 message the client answered with PUBREC is its own. Its
    acknowledgement on the session's subscription reaches the disk only at the cursor's next flush
    (here: not before the kill), so the restarted broker's subscription hands its entry out again;
    the session's record, written before the PUBREL, says it was delivered: it is not sent again,
    while the message after it in the same batch, not yet answered, is."""
    broker = broker_factory({"mqtt_port": 0, "cursor_flush_interval_seconds": 3600.0})
    name = unique("exactly-once")
    expiry = Properties(session_expiry_interval=HOUR)
    raw = RawClient(broker.mqtt_port, MQTT_5)
    raw.connect("once-only", clean=False, properties=expiry)
    raw.send(Subscribe(1, (Subscription(name, 2),), Properties()))
    raw.receive()  # SUBACK
    pulsar_client = client_factory(broker.service_url)
    producer = pulsar_client.create_producer(
        pulsar_name(name), batching_enabled=True, batching_max_publish_delay_ms=60_000
    )
    for payload in (b"two", b"two-b"):
        producer.send_async(payload, None)
    producer.flush()  # one entry of two messages
    producer.close()
    first = raw.receive()
    assert isinstance(first, Publish) and first.payload == b"two" and first.qos == 2
    raw.send(PubRec(first.packet_id))
    seen = [raw.receive(), raw.receive()]  # "two-b" and the PUBREL of "two", in either order
    assert PubRel(first.packet_id) in seen
    assert [p.payload for p in seen if isinstance(p, Publish)] == [b"two-b"]
    if answered == "pubcomp":
        raw.send(PubComp(first.packet_id))
        raw.send(PingReq())
        assert raw.receive() == PingResp()  # the PUBCOMP is handled: packets are, in order
    pulsar_client.close()
    broker.kill9()
    raw.close()
    broker.restart(same_port=False)
    raw = RawClient(broker.mqtt_port, MQTT_5)
    try:
        assert raw.connect("once-only", clean=False, properties=expiry).session_present is True
        pulsar_client = client_factory(broker.service_url)
        publishes: list[bytes] = []
        again = raw.receive()  # the PUBREL of "two" (unless its PUBCOMP was stored), or "two-b"
        while not (isinstance(again, Publish) and again.payload == b"two-b"):
            assert again == PubRel(first.packet_id), again
            raw.send(PubComp(first.packet_id))
            again = raw.receive()
        publishes.append(again.payload)
        raw.send(PubRec(again.packet_id))
        send(pulsar_client, name, [b"three"])
        while True:
            packet = raw.receive()
            if isinstance(packet, Publish):
                publishes.append(packet.payload)
                if packet.payload == b"three":
                    break
        assert publishes == [b"two-b", b"three"]  # "two" never again
    finally:
        raw.close()


def test_a_3_1_1_session_is_kept_without_clean_session(mqtt_broker):
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_3_1_1)
    try:
        assert raw.connect("old-device", clean=False) == ConnAck(False, 0)
    finally:
        raw.close()
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_3_1_1)
    try:
        assert raw.connect("old-device", clean=False) == ConnAck(True, 0)
    finally:
        raw.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_session_that_ends_with_its_connection_is_not_resumed_by_a_takeover(
    mqtt_broker, client_factory, version
):
    """A clean session (3.1.1 Clean Session 1, 5.0 expiry 0) ends with its connection, also one
    taken over: the connection taking over without Clean Start gets no session (present 0) and
    a fresh durable one, which keeps what is published while it is away."""
    name = unique("takeover-clean")
    client_id = f"takeover-clean-{version}"
    first = RawClient(mqtt_broker.mqtt_port, version)
    try:
        assert first.connect(client_id, clean=True).session_present is False
        first.send(Subscribe(1, (Subscription(name, 1),)))
        first.receive()
        second = persistent(mqtt_broker.mqtt_port, client_id, version)
        try:
            assert second.session_present is False
            assert second.subscribe(name, 1) == [1]
        finally:
            second.close()
    finally:
        first.close()
    send(client_factory(mqtt_broker.service_url), name, [b"one", b"two"])
    third = persistent(mqtt_broker.mqtt_port, client_id, version)
    try:
        assert third.session_present is True
        eventually(lambda: third.received.payloads() == [b"one", b"two"], what="what it missed")
    finally:
        third.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_filter_that_cannot_attach_at_resume_stays_in_the_session(mqtt_broker, client_factory, version):
    """Its durable subscription busy (a Pulsar consumer holds it, Exclusive) when the session
    resumes: the filter stays the session's and attaches once the subscription is free."""
    import pulsar

    name = unique("busy")
    client_id = f"busy-{version}"
    paho = persistent(mqtt_broker.mqtt_port, client_id, version)
    try:
        paho.subscribe(name, 1)
    finally:
        paho.close()
    pulsar_client = client_factory(mqtt_broker.service_url)
    holder = pulsar_client.subscribe(
        pulsar_name(name), client_id, consumer_type=pulsar.ConsumerType.Exclusive
    )
    paho = persistent(mqtt_broker.mqtt_port, client_id, version)
    try:
        assert paho.session_present is True
        holder.close()
        send(pulsar_client, name, [b"after"])
        eventually(
            lambda: paho.received.payloads() == [b"after"], what="the message, once the filter attached"
        )
    finally:
        paho.close()


def test_a_connections_flow_permits_are_bounded_whatever_its_filters_match(mqtt_broker, client_factory):
    """What a client's consumers may be sent ahead of its acknowledgements is bounded per
    connection (1000 permits, one at least per consumer), not per topic its filters match; every
    topic still gets its messages through."""
    from magnetar.broker.mqtt.outbound import PERMITS

    name = unique("many")
    topics = [f"{name}/{i}" for i in range(20)]
    pulsar_client = client_factory(mqtt_broker.service_url)
    send(pulsar_client, topics[0], [b"made"])
    for topic in topics[1:]:
        send(pulsar_client, topic, [b"made"])
    client_id = unique("wide").replace("/", "-")
    paho = persistent(mqtt_broker.mqtt_port, client_id, MQTT_5)
    try:
        paho.subscribe(f"{name}/#", 1)

        def permits() -> list[int]:
            out = []
            for topic in topics:
                local = pulsar_name(topic).split("/", 5)[-1]
                path = f"/admin/v2/persistent/public/default/{urllib.parse.quote(local, safe='')}/stats"
                status, stats = admin_call(mqtt_broker, "GET", path)
                assert status == 200, stats
                consumers = stats["subscriptions"].get(client_id, {}).get("consumers", [])
                assert consumers, f"no consumer on {topic} yet"
                out.append(consumers[0]["availablePermits"])
            return out

        given = eventually(permits, what="a consumer on each topic")
        assert sum(given) <= PERMITS + len(topics), given
        for topic in topics:
            send(pulsar_client, topic, [topic.encode()])
        eventually(
            lambda: sorted(paho.received.payloads()) == sorted(t.encode() for t in topics),
            what="a message from every topic",
        )
    finally:
        paho.close()
