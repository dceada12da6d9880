"""MQTT against ``magnetar standalone --workers 2`` (docs/mqtt.md, Workers): the MQTT port is one
for the whole broker, and what an MQTT client does reaches every topic whichever worker owns its
bundle: each test names topics owned by each worker (LOOKUP says which), so that one is served
in the MQTT worker's process and the other through the session to its owner."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import threading
import urllib.parse
import urllib.request
import uuid

import pulsar
import pytest

from magnetar.broker.mqtt.handoff import home_of
from magnetar.broker.mqtt.session_store import key_of
from magnetar.client.admin import AdminClient
from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    MQTT_5,
    Disconnect,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
)
from magnetar.protocol.mqtt.packets import Subscription
from magnetar.storage.store import METADATA_FILE

from ..waiting import eventually
from .mqtt_secure_support import SecurePahoClient, TlsRawClient, client_context
from .mqtt_support import PahoClient, RawClient
from .test_mqtt import VERSIONS, drain, nothing_more, pulsar_name
from .test_mqtt_retained import retained_for
from .test_mqtt_security import Secured
from .test_mqtt_sessions import subscriptions_of
from .test_workers import binary_lookups
from .test_workers_faults import SERVING, worker_pids
from .tls_certs import CLIENT_ROLE

pytestmark = pytest.mark.interop

MQTT_WORKERS = {"workers": 2, "mqtt_port": 0}
HOUR = 3600


@pytest.fixture
def mqtt_broker(broker_factory):
    return broker_factory(MQTT_WORKERS)


def on_each_worker(broker, pattern: str) -> list[str]:
    """MQTT Topic Names (``pattern`` with ``{}`` for a varying part), one owned by each worker."""
    names = [pattern.format(uuid.uuid4().hex[:8]) for _ in range(16)]
    owners = binary_lookups(broker.service_url, [pulsar_name(name) for name in names])
    by_owner = {}
    for name in names:
        by_owner.setdefault(owners[pulsar_name(name)], name)
    assert len(by_owner) == 2, owners
    return sorted(by_owner.values())


@pytest.mark.parametrize("version", VERSIONS)
def test_publish_and_subscribe_on_topics_of_each_worker(mqtt_broker, client_factory, version):
    names = on_each_worker(mqtt_broker, "plant/{}/temp")
    client = client_factory(mqtt_broker.service_url)
    readers = {name: client.subscribe(pulsar_name(name), "reader") for name in names}
    subscriber = PahoClient(mqtt_broker.mqtt_port, f"sub-{version}", version)
    publisher = PahoClient(mqtt_broker.mqtt_port, f"pub-{version}", version)
    try:
        for name in names:
            assert subscriber.subscribe(name, 2) == [2]
        sent = []
        for name in names:
            for qos in (0, 1, 2):
                publisher.publish(name, f"{name}-{qos}".encode(), qos)
                sent.append((name, f"{name}-{qos}".encode()))
        producers = {name: client.create_producer(pulsar_name(name)) for name in names}
        for name, producer in producers.items():  # a Pulsar producer's messages reach MQTT too
            producer.send(f"{name}-pulsar".encode())
            sent.append((name, f"{name}-pulsar".encode()))
        eventually(lambda: len(subscriber.received.messages) >= len(sent), what="every message")
        got = [(m[0], m[1]) for m in subscriber.received.messages]
        assert sorted(got) == sorted(sent)
        for name in names:  # in order per topic
            assert [p for t, p in got if t == name] == [p for t, p in sent if t == name]
        # Stored in each owner's topic: the official consumer reads them there.
        for name, reader in readers.items():
            assert [m.data() for m in drain(reader, 4)] == [p for t, p in sent if t == name]
    finally:
        subscriber.close()


def test_gmqtt_publishes_and_subscribes_across_workers(mqtt_broker):
    import gmqtt

    names = on_each_worker(mqtt_broker, "gm/{}/state")

    async def run() -> list[tuple[str, bytes]]:
        got: list[tuple[str, bytes]] = []
        done = asyncio.Event()
        subscriber = gmqtt.Client("gm-sub")

        def on_message(client, topic, payload, qos, properties):
            got.append((topic, payload))
            if len(got) == 2 * len(names):
                done.set()
            return 0

        subscriber.on_message = on_message
        await subscriber.connect("127.0.0.1", mqtt_broker.mqtt_port, version=gmqtt.constants.MQTTv50)
        for name in names:
            subscriber.subscribe(name, qos=1)
        publisher = gmqtt.Client("gm-pub")
        await publisher.connect("127.0.0.1", mqtt_broker.mqtt_port, version=gmqtt.constants.MQTTv311)
        for _ in range(50):  # until both SUBACKs are in (gmqtt has no SUBACK wait)
            if len(subscriber.subscriptions) == len(names) and all(
                s.acknowledged for s in subscriber.subscriptions
            ):
                break
            await asyncio.sleep(0.05)
        for name in names:
            for i in range(2):
                publisher.publish(name, f"{name}-{i}".encode(), qos=1)
        await asyncio.wait_for(done.wait(), 10)
        await publisher.disconnect()
        await subscriber.disconnect()
        return got

    got = asyncio.run(run())
    assert sorted(got) == sorted((name, f"{name}-{i}".encode()) for name in names for i in range(2))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_wildcard_over_topics_of_both_workers_and_topics_created_later(
    mqtt_broker, client_factory, version
):
    city = f"city-{uuid.uuid4().hex[:6]}"
    before = on_each_worker(mqtt_broker, city + "/before-{}/temp")
    later = on_each_worker(mqtt_broker, city + "/later-{}/temp")
    client = client_factory(mqtt_broker.service_url)
    early = {name: client.create_producer(pulsar_name(name)) for name in before}
    paho = PahoClient(mqtt_broker.mqtt_port, f"wild-{version}", version)
    try:
        assert paho.subscribe(f"{city}/+/temp", 1) == [1]
        for name, producer in early.items():
            producer.send(name.encode())
        made = {name: client.create_producer(pulsar_name(name)) for name in later}  # after SUBSCRIBE
        for name, producer in made.items():
            producer.send(name.encode())
        wanted = sorted(before + later)
        eventually(lambda: len(paho.received.messages) >= len(wanted), what="a message of each topic")
        assert sorted(m[0] for m in paho.received.messages) == wanted
        assert sorted(m[1].decode() for m in paho.received.messages) == wanted
    finally:
        paho.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_persistent_session_gets_what_it_missed_on_both_workers(mqtt_broker, client_factory, version):
    names = on_each_worker(mqtt_broker, "fleet/{}/car")
    client_id = f"car-{version}"
    expiry = HOUR if version == MQTT_5 else None
    paho = PahoClient(mqtt_broker.mqtt_port, client_id, version, clean=False, session_expiry=expiry)
    try:
        for name in names:
            assert paho.subscribe(name, 1) == [1]
    finally:
        paho.close()
    client = client_factory(mqtt_broker.service_url)
    missed = []
    for name in names:
        producer = client.create_producer(pulsar_name(name))
        for i in range(3):
            producer.send(f"{name}-missed-{i}".encode())
            missed.append((name, f"{name}-missed-{i}".encode()))
        producer.close()
    paho = PahoClient(mqtt_broker.mqtt_port, client_id, version, clean=False, session_expiry=expiry)
    try:
        assert paho.session_present is True
        eventually(lambda: len(paho.received.messages) >= len(missed), what="what the session missed")
        assert sorted((m[0], m[1]) for m in paho.received.messages) == sorted(missed)
    finally:
        paho.close()
    # Clean Start ends the session: its durable subscriptions go on each owner.
    paho = PahoClient(mqtt_broker.mqtt_port, client_id, version, clean=True)
    paho.close()
    consumers = {name: client.subscribe(pulsar_name(name), client_id) for name in names}
    for name in names:  # the subscription is new (made now, at the end): nothing left in it
        producer = client.create_producer(pulsar_name(name))
        producer.send(b"after")
        assert [m.data() for m in drain(consumers[name], 1)] == [b"after"]


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_messages_on_topics_of_both_workers(mqtt_broker, version):
    names = on_each_worker(mqtt_broker, "sensor/{}/state")
    publisher = PahoClient(mqtt_broker.mqtt_port, f"retainer-{version}", version)
    try:
        for name in names:
            publisher.publish(name, f"{name}-kept".encode(), 1, retain=True)
    finally:
        publisher.close()
    for name in names:
        assert retained_for(mqtt_broker.mqtt_port, name, version, 1) == [
            (name, f"{name}-kept".encode(), 1, True)
        ]
    everything = retained_for(mqtt_broker.mqtt_port, "sensor/+/state", version, 2)
    assert sorted(m[0] for m in everything) == names


def test_qos2_sent_again_to_another_workers_topic_is_stored_once(mqtt_broker, client_factory):
    client = client_factory(mqtt_broker.service_url)
    names = on_each_worker(mqtt_broker, "once/{}")
    consumers = {name: client.subscribe(pulsar_name(name), "reader") for name in names}
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_5)
    try:
        assert raw.connect("raw-once").reason_code == 0
        for packet_id, name in enumerate(names, start=7):
            raw.send(Publish(name, b"exactly-once", 2, packet_id=packet_id))
            assert raw.receive() == PubRec(packet_id)
            raw.send(Publish(name, b"exactly-once", 2, dup=True, packet_id=packet_id))
            assert raw.receive() == PubRec(packet_id)
            raw.send(PubRel(packet_id))
            assert raw.receive() == PubComp(packet_id)
    finally:
        raw.close()
    for consumer in consumers.values():
        assert [m.data() for m in drain(consumer, 1)] == [b"exactly-once"]
        assert nothing_more(consumer)


def test_a_shared_group_on_another_workers_topic(mqtt_broker, client_factory):
    names = on_each_worker(mqtt_broker, "jobs/{}")
    client = client_factory(mqtt_broker.service_url)
    for name in names:
        members = [PahoClient(mqtt_broker.mqtt_port, f"member-{i}-{name}", MQTT_5) for i in range(2)]
        try:
            for member in members:
                assert member.subscribe(f"$share/crew/{name}", 1) == [1]
            producer = client.create_producer(pulsar_name(name))
            payloads = [f"job-{i}".encode() for i in range(20)]
            for payload in payloads:
                producer.send(payload)
            eventually(
                lambda members=members, payloads=payloads: (
                    sum(len(m.received.messages) for m in members) >= len(payloads)
                ),
                what="every job",
            )
            shares = [m.received.payloads() for m in members]
            assert sorted(p for share in shares for p in share) == sorted(payloads)  # each to one member
            assert all(shares), shares
        finally:
            for member in members:
                member.close()


@pytest.mark.slow
def test_a_will_on_another_workers_topic(mqtt_broker, client_factory):
    names = on_each_worker(mqtt_broker, "status/{}")
    client = client_factory(mqtt_broker.service_url)
    consumers = {name: client.subscribe(pulsar_name(name), "watch") for name in names}
    for name in names:
        paho = PahoClient(mqtt_broker.mqtt_port, f"dying-{name}", MQTT_5, will=(name, b"gone", 1, False))
        paho.drop()
    for consumer in consumers.values():
        message = consumer.receive(10_000)
        assert message.data() == b"gone"
    with pytest.raises(pulsar.Timeout):
        next(iter(consumers.values())).receive(100)


def test_a_taken_over_durable_session_keeps_its_subscriptions_on_both_workers(mqtt_broker, client_factory):
    names = on_each_worker(mqtt_broker, "taken/{}")
    first = RawClient(mqtt_broker.mqtt_port, MQTT_3_1_1)
    second = RawClient(mqtt_broker.mqtt_port, MQTT_3_1_1)
    try:
        assert first.connect("taker", clean=False).reason_code == 0
        first.send(Subscribe(1, tuple(Subscription(name, 1) for name in names)))
        assert first.receive() == SubAck(1, (1, 1))
        # The second connection takes the session over at once: its consumers at each owner
        # replace the first's (the owner may still have the first's a moment: asked again).
        assert second.connect("taker", clean=False).session_present is True
        assert first.closed_after() == []
        client = client_factory(mqtt_broker.service_url)
        for name in names:
            client.create_producer(pulsar_name(name)).send(name.encode())
        got = []
        for _ in names:
            packet = second.receive()
            assert isinstance(packet, Publish)
            second.send(PubAck(packet.packet_id))
            got.append((packet.topic, packet.payload))
        assert sorted(got) == [(name, name.encode()) for name in names]
    finally:
        first.close()
        second.close()


def test_bundles_unloaded_under_mqtt_clients_lose_nothing(mqtt_broker, client_factory):
    """The bundles of both topics unloaded (their owners change): the MQTT client's consumers
    and producers there are closed, made again wherever the topics are served then, and the
    durable session gets every message, before and after."""
    names = on_each_worker(mqtt_broker, "moving/{}")
    admin = AdminClient(mqtt_broker.http_url)
    client = client_factory(mqtt_broker.service_url)
    producers = {name: client.create_producer(pulsar_name(name), batching_enabled=False) for name in names}
    subscriber = PahoClient(mqtt_broker.mqtt_port, "mover", MQTT_5, clean=False, session_expiry=HOUR)
    publisher = PahoClient(mqtt_broker.mqtt_port, "mover-pub", MQTT_5)
    try:
        for name in names:
            assert subscriber.subscribe(name, 1) == [1]
        sent = []
        for name in names:
            publisher.publish(name, f"{name}-mqtt-before".encode(), 1)
            producers[name].send(f"{name}-before".encode())
            sent += [(name, f"{name}-mqtt-before".encode()), (name, f"{name}-before".encode())]
        for name in names:
            admin.namespaces.unload_namespace_bundle(
                "public/default", admin.lookups.get_bundle_range(pulsar_name(name))
            )
        for name in names:
            producers[name].send(f"{name}-after".encode())  # the Pulsar producer follows by itself
            sent.append((name, f"{name}-after".encode()))
        for name in names:
            eventually(
                lambda name=name: _published(publisher, name, f"{name}-mqtt-after".encode()),
                what=f"an MQTT PUBLISH to {name} after the unload",
            )
            sent.append((name, f"{name}-mqtt-after".encode()))
        eventually(lambda: set(sent) <= {(m[0], m[1]) for m in subscriber.received.messages}, what="all")
    finally:
        subscriber.close()


def _published(publisher: PahoClient, name: str, payload: bytes) -> bool:
    """One QoS 1 PUBLISH acknowledged with success (refused while its topic moves: False)."""
    codes: dict[int, int] = {}
    publisher.client.on_publish = lambda c, u, mid, reason, props: codes.__setitem__(mid, int(reason.value))
    info = publisher.client.publish(name, payload, qos=1)
    info.wait_for_publish(10)
    return eventually(lambda: info.mid in codes, what="the PUBACK") and codes[info.mid] == 0


@pytest.mark.slow
def test_a_token_reaches_the_topics_of_both_workers(broker_factory):
    """With authentication on, the owner checks the MQTT client's own token (sealed by the MQTT
    worker), as for the WebSocket API."""
    side = Secured(broker_factory, None, False, workers=2)
    try:
        admin = side.admin()
        candidates = [f"tokens/{uuid.uuid4().hex[:8]}" for _ in range(16)]
        by_owner = {admin.lookups.lookup_topic(pulsar_name(name)): name for name in candidates}
        assert len(by_owner) == 2, by_owner
        names = sorted(by_owner.values())
        readers = {name: side.pulsar().subscribe(pulsar_name(name), "reader") for name in names}
        paho = SecurePahoClient(side.broker.mqtt_port, "car-token", MQTT_5, token=side.token("car-1"))
        try:
            assert paho.connack == 0
            for name in names:
                assert paho.subscribe(name, 1) == [1]
                paho.publish(name, f"{name}-signed".encode(), 1)
            eventually(lambda: len(paho.received.messages) >= len(names), what="both messages back")
            assert sorted(m[1] for m in paho.received.messages) == [f"{n}-signed".encode() for n in names]
        finally:
            paho.close()
        for name, reader in readers.items():
            assert reader.receive(10_000).data() == f"{name}-signed".encode()
    finally:
        side.close()


@pytest.mark.slow
def test_the_other_worker_killed_under_an_mqtt_session_loses_nothing(mqtt_broker, client_factory):
    """The worker owning a topic an MQTT session uses is killed with -9: the supervisor starts it
    again, the session's consumer (its session at the worker that lives on) subscribes again
    wherever the topic is served then, and every message stored in its durable subscription
    reaches it; a client whose home is the killed worker connects again once it is back."""
    names = on_each_worker(mqtt_broker, "doomed/{}")
    serving = {
        f"pulsar://{mqtt_broker.host}:{port}": (worker, int(pid))
        for worker, pid, port in SERVING.findall(mqtt_broker.log_text())
    }
    owners = binary_lookups(mqtt_broker.service_url, [pulsar_name(name) for name in names])
    (doomed,) = [name for name in names if serving[owners[pulsar_name(name)]][0] != "worker-0"]
    victim = serving[owners[pulsar_name(doomed)]][1]
    spared_id, doomed_id = client_ids_homed_on_each_worker("survivor")  # homes: worker-0, worker-1
    client = client_factory(mqtt_broker.service_url, operation_timeout_seconds=30)
    producer = client.create_producer(pulsar_name(doomed), batching_enabled=False)
    subscriber = PahoClient(mqtt_broker.mqtt_port, spared_id, MQTT_5, clean=False, session_expiry=HOUR)
    try:
        assert subscriber.subscribe(doomed, 1) == [1]
        for i in range(5):
            producer.send(f"before-{i}".encode())
        eventually(lambda: len(subscriber.received.messages) >= 5, what="the messages before the kill")
        os.kill(victim, signal.SIGKILL)
        eventually(lambda: len(SERVING.findall(mqtt_broker.log_text())) == 3, what="the worker started again")
        for i in range(5):
            producer.send(f"after-{i}".encode())  # the Pulsar producer follows by itself
        publisher = PahoClient(mqtt_broker.mqtt_port, doomed_id, MQTT_5)  # its home is back
        try:
            eventually(lambda: _published(publisher, doomed, b"mqtt-after"), what="an MQTT PUBLISH after")
        finally:
            publisher.close()
        wanted = {f"before-{i}".encode() for i in range(5)} | {f"after-{i}".encode() for i in range(5)}
        wanted.add(b"mqtt-after")
        eventually(lambda: wanted <= set(subscriber.received.payloads()), what="every message")
    finally:
        subscriber.close()


def client_ids_homed_on_each_worker(prefix: str) -> list[str]:
    """A client id whose session lives at worker 0 and one at worker 1 (handoff.py)."""
    ids = [f"{prefix}-{i}" for i in range(20)]
    return [next(i for i in ids if home_of(i, 2) == worker) for worker in (0, 1)]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_connect_is_served_whichever_worker_it_lands_on(mqtt_broker, client_factory, version):
    """Every worker serves the MQTT port; a CONNECT landing on a worker that is not its client id's
    home is handed there with its socket. Many connections of each client id land on both workers
    (the kernel spreads them): each is served, and its session found, every time."""
    names = on_each_worker(mqtt_broker, "landing/{}")
    client = client_factory(mqtt_broker.service_url)
    producers = {name: client.create_producer(pulsar_name(name)) for name in names}
    for client_id in client_ids_homed_on_each_worker(f"lander-{version}"):
        first = RawClient(mqtt_broker.mqtt_port, version)
        try:  # a durable session, subscribed to a topic of each worker
            assert first.connect(client_id, clean=False, **_expiry(version)).reason_code == 0
            first.send(Subscribe(1, tuple(Subscription(name, 1) for name in names)))
            assert first.receive() == SubAck(1, (1, 1))
        finally:
            first.close()
        for attempt in range(8):
            for name, producer in producers.items():
                producer.send(f"{client_id}-{attempt}-{name}".encode())
            raw = RawClient(mqtt_broker.mqtt_port, version)
            try:
                connack = raw.connect(client_id, clean=False, **_expiry(version))
                assert (connack.reason_code, connack.session_present) == (0, True), (attempt, connack)
                got = set()
                for _ in names:  # what it missed while away, from both workers
                    packet = raw.receive()
                    assert isinstance(packet, Publish), packet
                    raw.send(PubAck(packet.packet_id))
                    got.add(packet.payload)
                assert got == {f"{client_id}-{attempt}-{name}".encode() for name in names}
                raw.send(Disconnect())
            finally:
                raw.close()


def _expiry(version: int) -> dict:
    return {"properties": Properties(session_expiry_interval=HOUR)} if version == MQTT_5 else {}


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_an_away_durable_session_is_subscribed_to_topics_created_at_any_worker(
    mqtt_broker, client_factory, version
):
    """A durable session away, homed on either worker, whose wildcard filter matches a topic
    created meanwhile (by a Pulsar producer) at either worker, gets its durable subscription
    there from the topic's first message: what was published while it was away waits for it."""
    city = f"away-{uuid.uuid4().hex[:6]}"
    homes = client_ids_homed_on_each_worker(f"away-{version}")
    for client_id in homes:
        raw = RawClient(mqtt_broker.mqtt_port, version)
        try:
            assert raw.connect(client_id, clean=False, **_expiry(version)).reason_code == 0
            raw.send(Subscribe(1, (Subscription(f"{city}/+/t", 1),)))
            assert raw.receive() == SubAck(1, (1,))
            raw.send(Disconnect())
        finally:
            raw.close()
    names = on_each_worker(mqtt_broker, city + "/{}/t")  # LOOKUP creates no topic
    client = client_factory(mqtt_broker.service_url)
    producers = {name: client.create_producer(pulsar_name(name)) for name in names}
    for name, producer in producers.items():
        producer.send(f"{name}-first".encode())
    for name in names:  # each home subscribed its session there, whichever worker owns the topic
        eventually(
            lambda name=name: set(homes) <= set(subscriptions_of(mqtt_broker, name)),
            what=f"the away sessions' subscriptions on {name}",
        )
    for name, producer in producers.items():
        producer.send(f"{name}-second".encode())
    for client_id in homes:
        raw = RawClient(mqtt_broker.mqtt_port, version)
        try:
            connack = raw.connect(client_id, clean=False, **_expiry(version))
            assert (connack.reason_code, connack.session_present) == (0, True)
            got = []
            for _ in range(2 * len(names)):
                packet = raw.receive()
                assert isinstance(packet, Publish), packet
                raw.send(PubAck(packet.packet_id))
                got.append((packet.topic, packet.payload))
            wanted = [(name, f"{name}-{which}".encode()) for name in names for which in ("first", "second")]
            assert sorted(got) == sorted(wanted)
            for name in names:  # in order per topic
                assert [p for t, p in got if t == name] == [p for t, p in wanted if t == name]
            raw.send(Disconnect())
        finally:
            raw.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_retained_message_set_at_one_worker_is_sent_at_the_other_at_once(mqtt_broker, version):
    """The sessions of the publisher and of the subscriber live at different workers: the
    retained message, PUBACKed at one, goes to a SUBSCRIBE at the other right after."""
    homes = client_ids_homed_on_each_worker(f"retain-{version}")
    for publisher_id, subscriber_id in (homes, homes[::-1]):
        name = f"state/{uuid.uuid4().hex[:8]}"
        publisher = RawClient(mqtt_broker.mqtt_port, version)
        subscriber = RawClient(mqtt_broker.mqtt_port, version)
        try:
            assert publisher.connect(publisher_id).reason_code == 0
            assert subscriber.connect(subscriber_id).reason_code == 0
            publisher.send(Publish(name, b"kept", 1, retain=True, packet_id=1))
            assert publisher.receive() == PubAck(1)
            subscriber.send(Subscribe(1, (Subscription(name, 1),)))
            assert subscriber.receive() == SubAck(1, (1,))
            packet = subscriber.receive()
            assert isinstance(packet, Publish) and (packet.topic, packet.payload, packet.retain) == (
                name,
                b"kept",
                True,
            )
        finally:
            publisher.close()
            subscriber.close()


@pytest.mark.slow
def test_publishes_in_flight_while_the_bundle_moves_are_all_stored_once(mqtt_broker, client_factory):
    """A 3.1.1 client (which has no negative PUBACK: a refusal would close its connection) keeps
    publishing to another worker's topic while its bundle is unloaded: every PUBLISH is PUBACKed,
    on the same connection, and stored once, in order (a send the old owner dropped goes again
    to the new one, with its sequence id)."""
    publisher_id = client_ids_homed_on_each_worker("mover-raw")[0]
    names = on_each_worker(mqtt_broker, "inflight/{}")
    admin = AdminClient(mqtt_broker.http_url)
    client = client_factory(mqtt_broker.service_url)
    count = 1000
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_3_1_1)
    try:
        assert raw.connect(publisher_id).reason_code == 0
        for name in names:
            sending = threading.Thread(
                target=lambda name=name: [
                    raw.send(Publish(name, f"m-{i}".encode(), 1, packet_id=i + 1)) for i in range(count)
                ]
            )
            sending.start()
            acked = set()
            while len(acked) < count:
                acked.add(raw.receive().packet_id)
                if len(acked) == count // 4:  # the bundle moves while PUBLISHes are in flight
                    admin.namespaces.unload_namespace_bundle(
                        "public/default", admin.lookups.get_bundle_range(pulsar_name(name))
                    )
            sending.join()
            assert acked == set(range(1, count + 1))
            # Read from the start once all is stored (a consumer attached through the move would
            # get again what it had not acknowledged yet, as Pulsar's do).
            reader = client.subscribe(
                pulsar_name(name), "reader", initial_position=pulsar.InitialPosition.Earliest
            )
            assert [m.data() for m in drain(reader, count)] == [f"m-{i}".encode() for i in range(count)]
            assert nothing_more(reader)
            reader.close()
    finally:
        raw.close()


@pytest.mark.slow
@pytest.mark.parametrize("served_here", [True, False], ids=["from-the-mqtt-worker", "to-the-mqtt-worker"])
def test_publishes_in_flight_while_the_bundle_moves_to_the_other_worker_are_all_stored_once(
    mqtt_broker, client_factory, served_here
):
    """As above, the bundle going to the other worker (whose other bundles are unloaded first: a
    bundle goes to the worker that owns the fewest): a topic of the MQTT worker is then reached
    through a session to its new owner; one reached through a session is then served in the MQTT
    worker's process, the sends its old owner dropped stored there, each in an entry of its own
    (the old owner may have stored it: deduplication judges a batch by its highest sequence id)."""
    publisher_id = client_ids_homed_on_each_worker("mover-away")[0]  # served by worker 0
    ports = {worker: port for worker, _, port in SERVING.findall(mqtt_broker.log_text())}
    mqtt_worker = f"pulsar://{mqtt_broker.host}:{ports['worker-0']}"
    names = [f"away/{uuid.uuid4().hex[:8]}" for _ in range(40)]  # in every bundle (4 of them)
    owners = binary_lookups(mqtt_broker.service_url, [pulsar_name(name) for name in names])
    name = next(name for name in names if (owners[pulsar_name(name)] == mqtt_worker) == served_here)
    before = owners[pulsar_name(name)]
    admin = AdminClient(mqtt_broker.http_url)
    others = {
        admin.lookups.get_bundle_range(pulsar_name(other))
        for other in names
        if owners[pulsar_name(other)] != before
    }
    for bundle in others:  # the other worker then owns the fewest: the next owner
        admin.namespaces.unload_namespace_bundle("public/default", bundle)
    client = client_factory(mqtt_broker.service_url)
    count = 1000
    raw = RawClient(mqtt_broker.mqtt_port, MQTT_3_1_1)
    window = threading.Semaphore(100)  # in flight at once: the PUBLISHes go on through the move

    def send_all() -> None:
        for i in range(count):
            window.acquire()
            raw.send(Publish(name, f"m-{i}".encode(), 1, packet_id=i + 1))

    try:
        assert raw.connect(publisher_id).reason_code == 0
        sending = threading.Thread(target=send_all, daemon=True)
        sending.start()
        bundle = admin.lookups.get_bundle_range(pulsar_name(name))
        unloading = threading.Thread(
            target=lambda: admin.namespaces.unload_namespace_bundle("public/default", bundle), daemon=True
        )
        acked = set()
        while len(acked) < count:
            acked.add(raw.receive().packet_id)
            window.release()
            if len(acked) == count // 4:  # PUBACKs go on being read while it is unloaded
                unloading.start()
        sending.join()
        unloading.join()
        assert acked == set(range(1, count + 1))
    finally:
        raw.close()
    assert binary_lookups(mqtt_broker.service_url, [pulsar_name(name)])[pulsar_name(name)] != before
    reader = client.subscribe(pulsar_name(name), "reader", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in drain(reader, count)] == [f"m-{i}".encode() for i in range(count)]
    assert nothing_more(reader)


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_mqtts_is_served_by_every_worker_and_relayed_to_the_home(broker_factory, tls_files, version):
    """Every worker serves ``mqtts_port``; a TLS connection landing on a worker that is not its
    client id's home is relayed there (relay.py): a durable session over TLS with a token, homed
    on each worker, connects again and again (the kernel spreads the connections over both
    workers), finds its session each time and gets what it missed on topics of both workers;
    a plain client's PUBLISH reaches it live."""
    side = Secured(broker_factory, tls_files, False, workers=2)
    try:
        admin = side.admin()
        candidates = [f"tls-relay/{uuid.uuid4().hex[:8]}" for _ in range(16)]
        by_owner = {admin.lookups.lookup_topic(pulsar_name(name)): name for name in candidates}
        assert len(by_owner) == 2, by_owner
        names = sorted(by_owner.values())
        context = client_context(tls_files.ca)
        port = side.broker.mqtts_port
        client = side.pulsar()
        producers = {name: client.create_producer(pulsar_name(name)) for name in names}
        login = {"username": "car", "password": side.token("car").encode()}
        for client_id in client_ids_homed_on_each_worker(f"tls-{version}"):
            first = TlsRawClient(port, context, version)
            try:
                connack = first.connect(client_id, False, **login, **_expiry(version))
                assert connack.reason_code == 0
                first.send(Subscribe(1, tuple(Subscription(name, 1) for name in names)))
                assert first.receive() == SubAck(1, (1, 1))
            finally:
                first.close()
            for attempt in range(6):
                for name, producer in producers.items():
                    producer.send(f"{client_id}-{attempt}-{name}".encode())
                raw = TlsRawClient(port, context, version)
                try:
                    connack = raw.connect(client_id, False, **login, **_expiry(version))
                    assert (connack.reason_code, connack.session_present) == (0, True), (attempt, connack)
                    got = set()
                    for _ in names:
                        packet = raw.receive()
                        assert isinstance(packet, Publish), packet
                        raw.send(PubAck(packet.packet_id))
                        got.add(packet.payload)
                    assert got == {f"{client_id}-{attempt}-{name}".encode() for name in names}
                    plain = SecurePahoClient(
                        side.broker.mqtt_port, "plain-pub", MQTT_3_1_1, token=side.token("car")
                    )
                    try:
                        plain.publish(names[0], b"live", 1)
                    finally:
                        plain.close()
                    packet = raw.receive()
                    assert isinstance(packet, Publish) and packet.payload == b"live", packet
                    raw.send(PubAck(packet.packet_id))
                    raw.send(Disconnect())
                    # The home closes it once it has read all: the next CONNECT, over another
                    # socket, may come to the home before the rest of this one otherwise.
                    assert raw.closed_after() == []
                finally:
                    raw.close()
        assert "is relayed to its home worker" in side.broker.log_text()
    finally:
        side.close()


@pytest.mark.slow
def test_paho_and_gmqtt_over_tls_on_every_worker(broker_factory, tls_files):
    """paho-mqtt subscribers over TLS, homed on each worker, get what a gmqtt publisher over TLS
    sends to topics of both workers, and a Pulsar producer's messages."""
    import gmqtt

    side = Secured(broker_factory, tls_files, False, workers=2)
    try:
        admin = side.admin()
        candidates = [f"tls-clients/{uuid.uuid4().hex[:8]}" for _ in range(16)]
        by_owner = {admin.lookups.lookup_topic(pulsar_name(name)): name for name in candidates}
        assert len(by_owner) == 2, by_owner
        names = sorted(by_owner.values())
        context = client_context(tls_files.ca)
        port = side.broker.mqtts_port
        subscribers = [
            SecurePahoClient(port, client_id, MQTT_5, token=side.token("car"), tls=context)
            for client_id in client_ids_homed_on_each_worker("tls-paho")
        ]
        try:
            for subscriber in subscribers:
                assert subscriber.connack == 0
                for name in names:
                    assert subscriber.subscribe(name, 1) == [1]

            async def publish() -> None:
                mqtt = gmqtt.Client("tls-gmqtt")
                mqtt.set_auth_credentials("x", side.token("car"))
                await mqtt.connect("127.0.0.1", port, ssl=context, version=MQTT_5)
                for name in names:
                    mqtt.publish(name, f"{name}-gmqtt".encode(), qos=1)

                def arrived() -> None:  # before the DISCONNECT: gmqtt sends in the background
                    for subscriber in subscribers:
                        got = subscriber.received.messages
                        eventually(lambda got=got: len(got) >= len(names), what="gmqtt's messages")

                await asyncio.to_thread(arrived)
                await mqtt.disconnect()

            asyncio.run(publish())
            client = side.pulsar()
            for name in names:
                client.create_producer(pulsar_name(name)).send(f"{name}-pulsar".encode())
            wanted = sorted((name, f"{name}-{who}".encode()) for name in names for who in ("gmqtt", "pulsar"))
            for subscriber in subscribers:
                eventually(lambda s=subscriber: len(s.received.messages) >= len(wanted), what="every message")
                assert sorted((m[0], m[1]) for m in subscriber.received.messages) == wanted
        finally:
            for subscriber in subscribers:
                subscriber.close()
    finally:
        side.close()


@pytest.mark.slow
def test_mutual_tls_identity_reaches_the_home_worker(broker_factory, tls_files):
    """The client certificate a relaying worker verified is the role at the home worker (sealed
    with the workers' secret): with the ``tls`` provider and authorization on, clients homed on
    each worker connect with a certificate and no password, many times, publish where the
    certificate's role may, and are refused where it may not; without a certificate, refused."""
    side = Secured(broker_factory, tls_files, True, workers=2, authentication_providers=["token", "tls"])
    try:
        allowed = f"cert-ok/{uuid.uuid4().hex[:8]}"
        side.admin().grant_permission(pulsar_name(allowed), CLIENT_ROLE, ["produce"])
        port = side.broker.mqtts_port
        with_cert = client_context(tls_files.ca, tls_files.client_cert, tls_files.client_key)
        sent = []

        def granted(client_id: str) -> bool:
            """The grant reached the client's home (each worker applies policy changes 10 times
            a second)."""
            raw = TlsRawClient(port, with_cert, MQTT_5)
            try:
                assert raw.connect(client_id).reason_code == 0
                raw.send(Publish(allowed, f"{client_id}-granted".encode(), 1, packet_id=1))
                if raw.receive().reason_code != 0:
                    return False
                sent.append(f"{client_id}-granted".encode())
                return True
            finally:
                raw.close()

        for client_id in client_ids_homed_on_each_worker("cert"):
            eventually(lambda client_id=client_id: granted(client_id), what="the grant at the home")
            for attempt in range(4):
                raw = TlsRawClient(port, with_cert, MQTT_5)
                try:
                    assert raw.connect(client_id).reason_code == 0
                    payload = f"{client_id}-{attempt}".encode()
                    raw.send(Publish(allowed, payload, 1, packet_id=1))
                    assert raw.receive() == PubAck(1)
                    sent.append(payload)
                    raw.send(Publish("cert-not-granted", b"no", 1, packet_id=2))
                    assert raw.receive().reason_code == ReasonCode.NOT_AUTHORIZED
                finally:
                    raw.close()
                raw = TlsRawClient(port, client_context(tls_files.ca), MQTT_5)
                try:
                    assert raw.connect(client_id).reason_code == ReasonCode.NOT_AUTHORIZED
                finally:
                    raw.close()
        log = side.broker.log_text()
        assert "is relayed to its home worker" in log
        assert f"authenticated as '{CLIENT_ROLE}' with tls" in log
        reader = side.pulsar().create_reader(pulsar_name(allowed), pulsar.MessageId.earliest)
        assert [reader.read_next(10_000).data() for _ in sent] == sent
    finally:
        side.close()


@pytest.mark.slow
def test_with_a_token_an_expired_session_deletes_its_subscription_at_the_other_worker(broker_factory):
    """With authentication on, a durable session whose topic another worker owns: once the session
    expires, its home worker deletes the subscription at the owner as itself (no client
    credentials are left then: the workers' sealed identity, broker/handlers/worker_access.py)."""
    side = Secured(broker_factory, None, False, workers=2)
    try:
        admin_token = side.token("root")
        serving = {
            f"pulsar://{side.broker.host}:{port}": worker
            for worker, _, port in SERVING.findall(side.broker.log_text())
        }
        home_id, _ = client_ids_homed_on_each_worker("expiring")  # its home is worker-0
        admin = side.admin()
        names = [f"expiring/{uuid.uuid4().hex[:8]}" for _ in range(16)]
        name = next(n for n in names if serving[admin.lookups.lookup_topic(pulsar_name(n))] == "worker-1")

        def subscriptions() -> list[str]:
            local = pulsar_name(name).removeprefix("persistent://public/default/")
            path = f"/admin/v2/persistent/public/default/{urllib.parse.quote(local, safe='')}/subscriptions"
            request = urllib.request.Request(
                side.broker.http_url + path, headers={"Authorization": f"Bearer {admin_token}"}
            )
            with urllib.request.urlopen(request, timeout=10) as answer:
                return sorted(json.load(answer))

        paho = SecurePahoClient(
            side.broker.mqtt_port, home_id, MQTT_5, token=side.token("car"), session_expiry=1
        )
        try:
            assert paho.connack == 0
            assert paho.subscribe(name, 1) == [1]
            assert subscriptions() == [home_id]
        finally:
            paho.close()
        eventually(
            lambda: subscriptions() == [], what="the expired session's subscription deleted at worker-1"
        )
        assert "is not deleted" not in side.broker.log_text()
    finally:
        side.close()


@pytest.mark.slow
def test_with_authorization_an_away_session_is_subscribed_where_its_role_may_consume(broker_factory):
    """With token authentication and authorization on, durable sessions away, homed on either
    worker, whose wildcard filter matches topics created meanwhile at either worker: a session
    whose role may consume gets its subscription there (at another worker, its home asks the owner
    as itself, carrying the session's role: ``worker_access.py``) and, when it comes back, what
    was published while it was away; a session whose role's grant was revoked while it was away
    gets no subscription, at its own worker or at the other."""
    side = Secured(broker_factory, None, True, workers=2)
    try:
        admin = side.admin()
        city = f"authz-away-{uuid.uuid4().hex[:6]}"
        allowed, revoked = "fleet-reader", "fleet-former"
        for role in (allowed, revoked):
            admin.namespaces.grant_permission("public/default", role, ["consume"])
        homes = {role: client_ids_homed_on_each_worker(f"authz-away-{role}") for role in (allowed, revoked)}

        def connect(client_id: str, role: str) -> SecurePahoClient:
            paho = SecurePahoClient(
                side.broker.mqtt_port, client_id, MQTT_5, token=side.token(role), session_expiry=HOUR
            )
            assert paho.connack == 0
            return paho

        def subscribed(client_id: str, role: str) -> bool:
            paho = connect(client_id, role)
            try:
                return paho.subscribe(f"{city}/+/t", 1) == [1]
            finally:
                paho.close()

        for role, client_ids in homes.items():
            for client_id in client_ids:  # the grant reaches each home 10 times a second
                eventually(lambda c=client_id, r=role: subscribed(c, r), what=f"{client_id} subscribed")
        admin.namespaces.revoke_permission("public/default", revoked)
        for client_id in client_ids_homed_on_each_worker("authz-away-probe"):
            eventually(
                lambda c=client_id: not subscribed(c, revoked), what=f"the revoke at the home of {client_id}"
            )
        serving = {
            f"pulsar://{side.broker.host}:{port}": worker
            for worker, _, port in SERVING.findall(side.broker.log_text())
        }
        candidates = [f"{city}/{uuid.uuid4().hex[:8]}/t" for _ in range(16)]
        by_owner = {serving[admin.lookups.lookup_topic(pulsar_name(n))]: n for n in candidates}
        names = sorted(by_owner.values())  # LOOKUP creates no topic
        assert len(names) == 2, by_owner
        producers = {name: side.pulsar().create_producer(pulsar_name(name)) for name in names}
        for name, producer in producers.items():
            producer.send(f"{name}-first".encode())

        def subscriptions(name: str) -> set[str]:
            return set(admin.topics.get_subscriptions(pulsar_name(name)))

        for name in names:
            eventually(
                lambda name=name: set(homes[allowed]) <= subscriptions(name),
                what=f"the allowed sessions' subscriptions on {name}",
            )
        log_text = side.broker.log_text
        for name in names:  # each refusal is logged where it is decided: the home's or the owner's
            for client_id in homes[revoked]:
                eventually(
                    lambda name=name, client_id=client_id: (
                        f"{pulsar_name(name)}: the subscription {client_id} is not made here" in log_text()
                        or f"MQTT client {client_id!r}, away: role {revoked!r} may not consume "
                        f"{pulsar_name(name)}"
                        in log_text()
                    ),
                    what=f"{client_id} refused on {name}",
                )
            assert not set(homes[revoked]) & subscriptions(name)
        assert f"role {revoked!r} of the session is not authorized to consume" in log_text()
        for name, producer in producers.items():
            producer.send(f"{name}-second".encode())
        wanted = sorted(f"{name}-{which}".encode() for name in names for which in ("first", "second"))
        for client_id in homes[allowed]:
            paho = connect(client_id, allowed)
            try:
                received = paho.received
                eventually(
                    lambda received=received: len(received.payloads()) >= len(wanted),
                    what=f"{client_id}'s messages",
                )
                assert sorted(received.payloads()) == wanted
            finally:
                paho.close()
    finally:
        side.close()


def worker_index_by_url(broker) -> dict[str, int]:
    """Each live worker's index (``worker-N``, as ``home_of`` counts) by its pulsar:// URL."""
    return {
        f"pulsar://{broker.host}:{port}": int(name.split("-")[1])
        for name, _, port in SERVING.findall(broker.log_text())
    }


@pytest.mark.slow
@pytest.mark.parametrize("killed", ["owner", "both"])
def test_a_qos_2_message_received_on_another_workers_topic_is_not_sent_again_after_a_kill_9(
    broker_factory, client_factory, killed
):
    """4.3.3 through a worker session (remote.py): a QoS 2 message of a topic another worker owns,
    which the client answered with PUBREC, is its own. Its acknowledgement reaches the owner's
    disk only at the owner's next cursor flush (here: not before the kill), so the owner, killed
    with -9 and started again by the supervisor, hands the entry out again; the client's session
    keeps the message's key until the owner answers that the acknowledgement is on disk
    (handlers/acks_on_disk.py), and does not send it again: with its connection open (``owner``
    killed) or resumed after both workers were killed (its record read back, the owner asked of
    those keys again)."""
    broker = broker_factory({**MQTT_WORKERS, "cursor_flush_interval_seconds": 3600.0})
    client_id = f"remote-once-{killed}"
    home = home_of(client_id, 2)
    names = on_each_worker(broker, "remote-once/{}")
    owners = binary_lookups(broker.service_url, [pulsar_name(name) for name in names])
    indexes = worker_index_by_url(broker)
    (name,) = [n for n in names if indexes[owners[pulsar_name(n)]] != home]  # the other worker's
    pids = worker_pids(broker)
    expiry = Properties(session_expiry_interval=HOUR)
    raw = RawClient(broker.mqtt_port, MQTT_5)
    raw.connect(client_id, clean=False, properties=expiry)
    raw.send(Subscribe(1, (Subscription(name, 2),), Properties()))
    assert raw.receive() == SubAck(1, (2,))
    pulsar_client = client_factory(broker.service_url)
    producer = pulsar_client.create_producer(pulsar_name(name))
    producer.send(b"two")
    first = raw.receive()
    assert isinstance(first, Publish) and first.payload == b"two" and first.qos == 2
    raw.send(PubRec(first.packet_id))
    assert raw.receive() == PubRel(first.packet_id)
    raw.send(PubComp(first.packet_id))
    raw.send(PingReq())
    assert raw.receive() == PingResp()  # the PUBCOMP is handled: packets are, in order
    owner_url = owners[pulsar_name(name)]
    victims = [owner_url] if killed == "owner" else list(pids)
    for url in victims:
        os.kill(pids[url], signal.SIGKILL)
    eventually(
        lambda: len(SERVING.findall(broker.log_text())) == 2 + len(victims),
        timeout=60,
        what="the killed workers started again",
    )
    if killed == "both":
        raw.close()
        raw = eventually(lambda: _resumed(broker.mqtt_port, client_id, expiry), timeout=30, what="resumed")
    try:
        publishes: list[bytes] = []
        producer = eventually(
            lambda: _producer(pulsar_client, pulsar_name(name)), timeout=30, what="a producer again"
        )
        producer.send(b"three")
        while True:
            packet = raw.receive(timeout=30)
            if packet == PubRel(first.packet_id):  # its PUBCOMP's record may not have been written
                raw.send(PubComp(first.packet_id))
                continue
            assert isinstance(packet, Publish), packet
            publishes.append(packet.payload)
            raw.send(PubRec(packet.packet_id))
            if packet.payload == b"three":
                break
        assert publishes == [b"three"]  # "two" never again
    finally:
        raw.close()


def _resumed(port: int, client_id: str, expiry: Properties) -> RawClient | None:
    raw = RawClient(port, MQTT_5)
    try:
        connack = raw.connect(client_id, clean=False, properties=expiry)
    except (ConnectionError, OSError):
        raw.close()
        return None
    assert connack.session_present is True, connack
    return raw


def _producer(client, topic: str):
    try:
        return client.create_producer(topic)
    except pulsar.PulsarException:
        return None


def session_record(broker, client_id: str) -> dict | None:
    """The MQTT session's record as the broker stored it (session_store.py), read from its
    metadata store without writing (the broker runs)."""
    path = broker.workdir / "data" / METADATA_FILE
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)) as db:
        row = db.execute("SELECT value FROM kv WHERE key = ?", (key_of(client_id),)).fetchone()
    return None if row is None else json.loads(row[0])


@pytest.mark.slow
def test_a_qos_2_message_received_on_another_workers_topic_leaves_the_record_once_on_the_owners_disk(
    broker_factory, client_factory
):
    """The key of a QoS 2 message PUBREC'd on a topic another worker owns is in the session's
    record before the PUBREL goes, and leaves it once the owner has answered that the
    acknowledgement is on disk (after its next cursor flush): the record does not grow with every
    message."""
    broker = broker_factory({**MQTT_WORKERS, "cursor_flush_interval_seconds": 0.2})
    client_id = "remote-pruned"
    home = home_of(client_id, 2)
    names = on_each_worker(broker, "remote-pruned/{}")
    owners = binary_lookups(broker.service_url, [pulsar_name(name) for name in names])
    indexes = worker_index_by_url(broker)
    (name,) = [n for n in names if indexes[owners[pulsar_name(n)]] != home]
    expiry = Properties(session_expiry_interval=HOUR)
    subscriber = RawClient(broker.mqtt_port, MQTT_5)
    try:
        subscriber.connect(client_id, clean=False, properties=expiry)
        subscriber.send(Subscribe(1, (Subscription(name, 2),), Properties()))
        assert subscriber.receive() == SubAck(1, (2,))
        client_factory(broker.service_url).create_producer(pulsar_name(name)).send(b"two")
        first = subscriber.receive()
        assert isinstance(first, Publish) and first.payload == b"two" and first.qos == 2
        subscriber.send(PubRec(first.packet_id))
        assert subscriber.receive() == PubRel(first.packet_id)
        record = session_record(broker, client_id)
        assert record is not None and len(record["delivered"]) == 1  # written before the PUBREL
        subscriber.send(PubComp(first.packet_id))
        eventually(
            lambda: "delivered" not in (session_record(broker, client_id) or {}),
            what="the key gone from the record once the owner's flush answered",
        )
    finally:
        subscriber.close()


@pytest.mark.slow
def test_a_burst_of_connects_is_handed_home_without_refusals(mqtt_broker):
    """300 clients CONNECT at once, about half of them landing on the worker that is not their
    session's home: each of those is handed over, also while the home's queue of handovers is
    full (Linux holds 10 unread ones: it is tried again a moment later, handoff.py), and every
    client gets CONNACK Success; none gets Server unavailable."""
    from bench.mqtt_client import connect

    ids = [f"burst-{i}" for i in range(300)]
    assert {home_of(i, 2) for i in ids} == {0, 1}

    async def run() -> list[BaseException]:
        results = await asyncio.gather(
            *(connect(mqtt_broker.mqtt_port, client_id) for client_id in ids), return_exceptions=True
        )
        for result in results:
            if not isinstance(result, BaseException):
                result.transport.close()
        return [r for r in results if isinstance(r, BaseException)]

    failures = asyncio.run(run())
    assert not failures, f"{len(failures)} refused or failed, e.g. {failures[:3]}"
