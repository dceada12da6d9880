"""MQTT shared subscriptions against the real broker process (docs/mqtt.md, Shared
subscriptions): ``$share/{group}/{filter}`` is the Pulsar Shared subscription named after the
group, whose messages go to one member each, MQTT clients (paho-mqtt, gmqtt; 3.1.1 and 5.0) and
official pulsar-client consumers alike."""

from __future__ import annotations

import asyncio
import collections
import select
import time

import pulsar
import pytest

from magnetar.protocol.mqtt import (
    MQTT_5,
    Disconnect,
    PingReq,
    PingResp,
    Properties,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    Subscribe,
)
from magnetar.protocol.mqtt.packets import Subscription

from ..waiting import eventually
from .mqtt_support import PahoClient, RawClient
from .support import admin_call
from .test_mqtt import VERSIONS, pulsar_name, unique


@pytest.fixture
def mqtt_broker(broker_factory):
    return broker_factory({"mqtt_port": 0})


def stats(broker, mqtt_name: str) -> dict:
    local = pulsar_name(mqtt_name).split("/", 5)[-1].replace("%", "%25")
    status, body = admin_call(broker, "GET", f"/admin/v2/persistent/public/default/{local}/stats")
    assert status == 200, body
    return body


@pytest.mark.parametrize("version", VERSIONS)
def test_a_group_shares_the_messages_with_a_pulsar_consumer(mqtt_broker, client_factory, version):
    name = unique("jobs")
    group = f"workers-{version}"
    members = [PahoClient(mqtt_broker.mqtt_port, unique("worker"), version) for _ in range(3)]
    client = client_factory(mqtt_broker.service_url)
    pulsar_member = client.subscribe(
        pulsar_name(name), group, consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=1
    )
    try:
        for member in members:
            assert member.subscribe(f"$share/{group}/{name}", 1) == [1]
        sub = stats(mqtt_broker, name)["subscriptions"][group]
        assert sub["type"] == "Shared" and len(sub["consumers"]) == 4  # one subscription, every member
        producer = client.create_producer(pulsar_name(name))
        payloads = [f"job-{i}".encode() for i in range(60)]
        for payload in payloads:
            producer.send(payload)
        taken = []
        while True:  # the Pulsar member takes its share as it goes
            try:
                message = pulsar_member.receive(200)
            except pulsar.Timeout:
                if sum(len(m.received.messages) for m in members) + len(taken) >= len(payloads):
                    break
                continue
            pulsar_member.acknowledge(message)
            taken.append(message.data())
        got = [m.received.payloads() for m in members]
        every = [p for share in got for p in share] + taken
        assert sorted(every) == sorted(payloads)  # each message to one member, none lost
        assert all(got) and taken, (got, taken)  # spread over all of them
        assert {m[0] for member in members for m in member.received.messages} == {name}
    finally:
        for member in members:
            member.close()


def test_a_member_leaving_leaves_its_share_to_the_others(mqtt_broker, client_factory):
    name = unique("handover")
    stays = PahoClient(mqtt_broker.mqtt_port, unique("stays"), MQTT_5)
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        stays.subscribe(f"$share/pair/{name}", 1)
        raw.connect(unique("leaves"))
        raw.send(Subscribe(1, (Subscription(f"$share/pair/{name}", 1),)))
        raw.receive()  # SUBACK
        producer = client_factory(mqtt_broker.service_url).create_producer(pulsar_name(name))
        for i in range(10):
            producer.send(f"m{i}".encode())
        held = raw.receive()  # the one that leaves takes messages and acknowledges none
        raw.close()
        eventually(lambda: len(stays.received.messages) >= 10, what="every message at the member left")
        assert sorted(stays.received.payloads()) == sorted(f"m{i}".encode() for i in range(10))
        assert held.payload in stays.received.payloads()
    finally:
        stays.close()


def test_no_retained_message_for_a_shared_subscription(mqtt_broker):
    name = unique("shared-retained")
    paho = PahoClient(mqtt_broker.mqtt_port, unique("pub"), MQTT_5)
    try:
        paho.publish(name, b"retained", 1, retain=True)
        paho.subscribe(f"$share/g/{name}", 1)
        paho.subscribe(name, 1)  # after the shared one: its retained message comes first
        eventually(lambda: paho.received.payloads() == [b"retained"], what="the retained one, once")
        assert [m[4] for m in paho.received.messages] == [True]
    finally:
        paho.close()


def test_no_local_on_a_shared_subscription_is_a_protocol_error(mqtt_broker):
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        raw.connect(unique("nolocal"))
        raw.send(Subscribe(1, (Subscription("$share/g/t", 1, no_local=True),)))
        (answer,) = raw.closed_after()
        assert isinstance(answer, Disconnect) and answer.reason_code == ReasonCode.PROTOCOL_ERROR
    finally:
        raw.close()


def test_a_wildcard_group_and_unsubscribe(mqtt_broker, client_factory):
    base = unique("zone")
    members = [PahoClient(mqtt_broker.mqtt_port, unique("m"), MQTT_5) for _ in range(2)]
    client = client_factory(mqtt_broker.service_url)
    try:
        for member in members:
            member.subscribe(f"$share/zones/{base}/+", 1)
        producers = {z: client.create_producer(pulsar_name(f"{base}/{z}")) for z in ("a", "b")}
        for i in range(20):
            producers["a" if i % 2 else "b"].send(f"{i}".encode())
        eventually(lambda: sum(len(m.received.messages) for m in members) >= 20, what="twenty messages")
        topics = collections.Counter(t for m in members for t, *_ in m.received.messages)
        assert topics == {f"{base}/a": 10, f"{base}/b": 10}
        members[0].unsubscribe(f"$share/zones/{base}/+")
        for i in range(4):
            producers["a"].send(f"late-{i}".encode())

        def late(member: PahoClient) -> list[bytes]:
            return [p for p in member.received.payloads() if p.startswith(b"late")]

        eventually(lambda: len(late(members[1])) == 4, what="the late ones at the member left")
        assert late(members[0]) == []
    finally:
        for member in members:
            member.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_gmqtt_shared_subscription(mqtt_broker, client_factory, version):
    import gmqtt

    name = unique("gmqtt/shared")
    client = client_factory(mqtt_broker.service_url)

    async def run() -> list[list[bytes]]:
        got: list[list[bytes]] = [[], []]
        members = []
        for index in range(2):
            subscribed = asyncio.Event()
            mqtt = gmqtt.Client(unique("gshared"))
            mqtt.on_message = lambda c, t, payload, q, p, i=index: got[i].append(payload) or 0
            mqtt.on_subscribe = lambda *args, e=subscribed: e.set()
            await mqtt.connect("127.0.0.1", mqtt_broker.mqtt_port, version=version)
            mqtt.subscribe(f"$share/gmqtt-group/{name}", qos=1)
            await asyncio.wait_for(subscribed.wait(), 10)
            members.append(mqtt)
        producer = client.create_producer(pulsar_name(name))
        for i in range(20):
            producer.send(f"{i}".encode())
        deadline = time.monotonic() + 10
        while sum(map(len, got)) < 20 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for mqtt in members:
            await mqtt.disconnect()
        return got

    got = asyncio.run(run())
    assert sorted(got[0] + got[1], key=int) == [f"{i}".encode() for i in range(20)]
    assert got[0] and got[1]


def test_a_durable_members_group_keeps_what_comes_while_all_are_away(mqtt_broker, client_factory):
    name = unique("queue")
    member = PahoClient(mqtt_broker.mqtt_port, "durable-member", MQTT_5, clean=False, session_expiry=3600)
    try:
        member.subscribe(f"$share/keepers/{name}", 1)
    finally:
        member.close()
    assert stats(mqtt_broker, name)["subscriptions"]["keepers"]["type"] == "Shared"
    producer = client_factory(mqtt_broker.service_url).create_producer(pulsar_name(name))
    for i in range(3):
        producer.send(f"kept-{i}".encode())
    member = PahoClient(mqtt_broker.mqtt_port, "durable-member", MQTT_5, clean=False, session_expiry=3600)
    try:
        eventually(lambda: len(member.received.messages) >= 3, what="what came while the group was away")
        assert member.received.payloads() == [b"kept-0", b"kept-1", b"kept-2"]
        member.unsubscribe(f"$share/keepers/{name}")  # its last member: the group goes
        assert "keepers" not in stats(mqtt_broker, name)["subscriptions"]
    finally:
        member.close()


@pytest.mark.slow
def test_a_qos_2_message_one_member_received_is_not_sent_to_another_after_a_kill_9(
    broker_factory, client_factory
):
    """4.3.3 for a durable group: a QoS 2 message one member answered with PUBREC is the group's
    own. Its acknowledgement on the group's subscription reaches the disk only at the cursor's
    next flush (here: not before the kill), so the restarted broker's subscription hands it out
    again, here to the other member (the first is away): that member's session knows from the
    first one's record that it was received, and it is not sent again."""
    broker = broker_factory({"mqtt_port": 0, "cursor_flush_interval_seconds": 3600.0})
    name = unique("group-once")
    expiry = Properties(session_expiry_interval=3600)
    members = {}
    for member in ("member-a", "member-b"):
        raw = RawClient(broker.mqtt_port, MQTT_5)
        raw.connect(member, clean=False, properties=expiry)
        raw.send(Subscribe(1, (Subscription(f"$share/crew/{name}", 2),), Properties()))
        raw.receive()  # SUBACK
        members[member] = raw
    pulsar_client = client_factory(broker.service_url)
    pulsar_client.create_producer(pulsar_name(name)).send(b"two")
    readable, _, _ = select.select([raw.sock for raw in members.values()], [], [], 10)
    holder = next(m for m, raw in members.items() if raw.sock in readable)  # the member it went to
    first = members[holder].receive()
    assert isinstance(first, Publish) and first.payload == b"two" and first.qos == 2
    members[holder].send(PubRec(first.packet_id))
    assert members[holder].receive() == PubRel(first.packet_id)
    members[holder].send(PubComp(first.packet_id))
    members[holder].send(PingReq())
    assert members[holder].receive() == PingResp()
    pulsar_client.close()
    broker.kill9()
    for raw in members.values():
        raw.close()
    broker.restart(same_port=False)
    (other,) = [m for m in members if m != holder]
    raw = RawClient(broker.mqtt_port, MQTT_5)
    try:
        assert raw.connect(other, clean=False, properties=expiry).session_present is True
        pulsar_client = client_factory(broker.service_url)
        pulsar_client.create_producer(pulsar_name(name)).send(b"three")
        publishes = []
        while not publishes or publishes[-1] != b"three":
            packet = raw.receive()
            assert isinstance(packet, Publish), packet
            publishes.append(packet.payload)
            raw.send(PubRec(packet.packet_id))
        assert publishes == [b"three"]  # "two" never again, to this member either
    finally:
        raw.close()
