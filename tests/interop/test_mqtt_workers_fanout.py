"""MQTT subscribers of one topic on both workers of ``--workers 2`` (docs/mqtt.md, Workers and
"many subscribers of one filter"): the clients of sessions that end with their connection whose
home is not the topic's owner are served by their worker's follower of the topic (the spread,
docs/architecture.md), one link to the owner for all of them, so each entry crosses the link
once, not once per subscriber; each client gets every message once, in order."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import urllib.parse
import urllib.request
import uuid

import pytest

from magnetar.broker.mqtt.handoff import home_of
from magnetar.client.admin import AdminClient
from magnetar.protocol.mqtt import MQTT_5

from ..waiting import eventually, eventually_async
from .mqtt_support import PahoClient
from .test_broadcast_spread import owner_stats
from .test_mqtt import pulsar_name
from .test_mqtt_workers import MQTT_WORKERS, on_each_worker
from .test_workers import binary_lookups
from .test_workers_faults import SERVING

pytestmark = pytest.mark.interop

PER_WORKER = 6
ALERTS = 30


def homed_on_each_worker(prefix: str, count: int) -> list[list[str]]:
    """``count`` client ids whose session lives at worker 0, and ``count`` at worker 1."""
    ids = [f"{prefix}-{i}" for i in range(20 * count)]
    return [[i for i in ids if home_of(i, 2) == worker][:count] for worker in (0, 1)]


@pytest.mark.slow
def test_mqtt_subscribers_on_both_workers_share_one_link_per_topic(broker_factory, client_factory):
    import gmqtt

    broker = broker_factory(MQTT_WORKERS)
    names = on_each_worker(broker, "city/{}/alerts")  # one topic owned by each worker
    homes = homed_on_each_worker("car", PER_WORKER)
    # A wildcard's topics are followed only where their worker follows them already: these
    # subscribe first, so each is a consumer of its own at the other worker's topic.
    watchers = [watcher for (watcher,) in homed_on_each_worker("watch", 1)]
    vehicles = watchers + [vehicle for home in homes for vehicle in home]
    client = client_factory(broker.service_url)
    producers = {name: client.create_producer(pulsar_name(name), batching_enabled=False) for name in names}
    sent = {name: [f"{name}-alert-{i}".encode() for i in range(ALERTS)] for name in names}
    during: dict[str, dict] = {}

    async def run() -> dict[str, dict[str, list[bytes]]]:
        got: dict[str, dict[str, list[bytes]]] = {v: {name: [] for name in names} for v in vehicles}
        subscribed = {v: asyncio.Event() for v in vehicles}
        connected = []
        for index, vehicle in enumerate(vehicles):
            mqtt = gmqtt.Client(vehicle)
            mqtt.on_message = lambda c, topic, payload, q, p, v=vehicle: got[v][topic].append(payload) or 0
            mqtt.on_subscribe = lambda *args, e=subscribed[vehicle]: e.set()
            await mqtt.connect("127.0.0.1", broker.mqtt_port, version=4 if index % 2 else 5)
            if vehicle in watchers:
                mqtt.subscribe("city/+/alerts", qos=1)
                await subscribed[vehicle].wait()
            else:
                mqtt.subscribe([gmqtt.Subscription(name, qos=1) for name in names])
            connected.append(mqtt)
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in subscribed.values())), 60)
        for name in names:
            during[name] = await asyncio.to_thread(owner_stats, broker, pulsar_name(name).replace("%", "%25"))

        def publish() -> None:
            for name, producer in producers.items():
                for alert in sent[name]:
                    producer.send(alert)

        await asyncio.to_thread(publish)
        await eventually_async(
            lambda: all(len(g[name]) >= ALERTS for g in got.values() for name in names),
            timeout=60,
            what="every alert of both topics at every vehicle",
        )
        for name in names:
            during[name] = await asyncio.to_thread(owner_stats, broker, pulsar_name(name).replace("%", "%25"))
        for mqtt in connected:
            await mqtt.disconnect()
        return got

    got = asyncio.run(run())
    for vehicle in vehicles:
        for name in names:  # every message once, in order, on either worker, by name or wildcard
            assert got[vehicle][name] == sent[name], (vehicle, name)
    served_at_owner = []
    for name in names:
        subscription = during[name]["subscriptions"]["mqtt-subscribers"]
        consumers = {c["consumerName"]: c for c in subscription["consumers"]}
        owner = during[name]["ownerBroker"]
        # The stats list every worker's clients, each naming the worker serving it ...
        assert set(consumers) == set(vehicles), sorted(consumers)
        assert subscription["consumersCount"] == len(vehicles)
        here = {n for n, c in consumers.items() if c["worker"] == owner} - set(watchers)
        (owner_home,) = [home for home in homes if set(home) == here]
        served_at_owner.append(homes.index(owner_home))
        # ... the other worker's vehicles (not its watcher: its own consumer at the owner) by its
        # follower, through one link, which carried each entry once, however many it serves.
        (other_home,) = [home for home in homes if home is not owner_home]
        assert all(consumers[v]["worker"] != owner for v in other_home)
        (link,) = subscription["spreadLinks"].values()
        assert link["msgOutCounter"] == ALERTS
        assert subscription["msgOutCounter"] == ALERTS * len(vehicles)
    assert sorted(served_at_owner) == [0, 1]  # each worker followed the other's topic


@pytest.mark.slow
def test_mqtt_subscribers_on_both_workers_follow_the_topic_to_its_next_owner(broker_factory, client_factory):
    """The topic's bundle moves to the worker that followed it: that worker's follower hands its
    clients to the topic it now loads as owner, and the old owner's clients are served by a
    follower of the new owner from then on: every client goes on getting what is published, in
    order, each message once."""
    mqtt_broker = broker_factory(MQTT_WORKERS)
    names = [f"moving-fleet/{uuid.uuid4().hex[:8]}" for _ in range(40)]  # in every bundle (4 of them)
    owners = binary_lookups(mqtt_broker.service_url, [pulsar_name(name) for name in names])
    name = names[0]
    before = owners[pulsar_name(name)]
    homes = homed_on_each_worker("moving-car", 2)
    vehicles = [PahoClient(mqtt_broker.mqtt_port, v, MQTT_5) for home in homes for v in home]
    producer = client_factory(mqtt_broker.service_url).create_producer(
        pulsar_name(name), batching_enabled=False
    )
    sent: list[bytes] = []

    def send(payload: str) -> None:
        producer.send(payload.encode())
        sent.append(payload.encode())

    try:
        for vehicle in vehicles:
            assert vehicle.subscribe(name, 1) == [1]
        for i in range(5):
            send(f"before-{i}")
        eventually(lambda: all(len(v.received.messages) >= 5 for v in vehicles), what="before the move")
        local = urllib.parse.quote(pulsar_name(name).split("/", 5)[-1], safe="")
        stats_path = f"/admin/v2/persistent/public/default/{local}/stats"
        assert _link_count(mqtt_broker, stats_path) == 1
        admin = AdminClient(mqtt_broker.http_url)
        others = {
            admin.lookups.get_bundle_range(pulsar_name(other))
            for other in names
            if owners[pulsar_name(other)] != before
        }
        for bundle in others:  # the other worker then owns the fewest: the next owner
            admin.namespaces.unload_namespace_bundle("public/default", bundle)
        moving = admin.lookups.get_bundle_range(pulsar_name(name))
        admin.namespaces.unload_namespace_bundle("public/default", moving)
        assert binary_lookups(mqtt_broker.service_url, [pulsar_name(name)])[pulsar_name(name)] != before
        # What is published while the clients' consumers move may not reach them (their sessions
        # end with their connections: from the end of the topic); once moved, every message does.
        _served_again_in_order(vehicles, send, sent, "the move")
        # At the new owner too, the other worker's clients are one consumer: its follower's link.
        eventually(lambda: _link_count(mqtt_broker, stats_path) == 1, what="one link at the new owner")
    finally:
        for vehicle in vehicles:
            vehicle.close()


def _served_again_in_order(vehicles: list[PahoClient], send, sent: list[bytes], after: str) -> None:
    """Once the topic moved (or its owner died): every vehicle gets what is published from some
    moment on (what is published while their consumers move may not reach them: their sessions
    end with their connections, from the end of the topic), then the last 5 messages, and what
    each got is the first 5, in order and once each."""
    moved = [0]

    def every_vehicle_served_again() -> bool:
        send(f"moving-{moved[0]}")
        moved[0] += 1
        return all(any(p.startswith(b"moving-") for p in v.received.payloads()) for v in vehicles)

    eventually(every_vehicle_served_again, what=f"every vehicle served again after {after}")
    final = [f"after-{i}".encode() for i in range(5)]
    for payload in final:
        send(payload.decode())
    eventually(lambda: all(v.received.payloads()[-5:] == final for v in vehicles), what=f"after {after}")
    for vehicle in vehicles:
        got = vehicle.received.payloads()
        assert got[:5] == sent[:5] and got[-5:] == final
        assert got == sorted(got, key=sent.index) and len(set(got)) == len(got)  # in order, once


def _link_count(broker, stats_path: str) -> int:
    """The links to other workers' followers at the topic's owner (its stats' ``spreadLinks``)."""
    with urllib.request.urlopen(broker.http_url + stats_path, timeout=10) as answer:
        stats = json.load(answer)
    return len(stats["subscriptions"]["mqtt-subscribers"].get("spreadLinks", {}))


@pytest.mark.slow
def test_the_owner_killed_under_followed_mqtt_subscribers(broker_factory, client_factory):
    """The worker owning the topic is killed with -9 while the other worker's follower serves its
    MQTT clients (their connections, at the worker that lives on, stay open). Whichever worker
    owns the topic next (the one that lives on: its follower hands the clients to the topic it
    loads; the one started again: the link reaches it there), every client goes on getting what
    is published once it is served again (what is published during the move may not reach it, as
    for any session that ends with its connection), in order, each message once."""
    mqtt_broker = broker_factory(MQTT_WORKERS)
    serving = {
        f"pulsar://{mqtt_broker.host}:{port}": (worker, int(pid))
        for worker, pid, port in SERVING.findall(mqtt_broker.log_text())
    }
    names = on_each_worker(mqtt_broker, "doomed-fleet/{}")
    owners = binary_lookups(mqtt_broker.service_url, [pulsar_name(name) for name in names])
    (name,) = [name for name in names if serving[owners[pulsar_name(name)]][0] != "worker-0"]
    victim = serving[owners[pulsar_name(name)]][1]
    (spared,) = homed_on_each_worker("spared-car", 2)[:1]  # homed on worker-0, which lives on
    vehicles = [PahoClient(mqtt_broker.mqtt_port, v, MQTT_5) for v in spared]
    client = client_factory(mqtt_broker.service_url, operation_timeout_seconds=30)
    producer = client.create_producer(pulsar_name(name), batching_enabled=False)
    sent: list[bytes] = []

    def send(payload: str) -> None:
        producer.send(payload.encode())
        sent.append(payload.encode())

    try:
        for vehicle in vehicles:
            assert vehicle.subscribe(name, 1) == [1]
        for i in range(5):
            send(f"before-{i}")
        eventually(lambda: all(len(v.received.messages) >= 5 for v in vehicles), what="before the kill")
        os.kill(victim, signal.SIGKILL)
        eventually(lambda: len(SERVING.findall(mqtt_broker.log_text())) == 3, what="the worker started again")
        _served_again_in_order(vehicles, send, sent, "the kill")
    finally:
        for vehicle in vehicles:
            vehicle.close()
