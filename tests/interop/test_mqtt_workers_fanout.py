"""MQTT subscribers of one topic on both workers of ``--workers 2`` (docs/mqtt.md, Workers and
"many subscribers of one filter"): the clients of sessions that end with their connection whose
home is not the topic's owner are served by their worker's follower of the topic (the spread,
docs/architecture.md), one link to the owner for all of them, so each entry crosses the link
once, not once per subscriber; each client gets every message once, in order."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.broker.mqtt.handoff import home_of

from ..waiting import eventually_async
from .test_broadcast_spread import LINK, owner_stats
from .test_mqtt import pulsar_name
from .test_mqtt_workers import MQTT_WORKERS, on_each_worker

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
    vehicles = [vehicle for home in homes for vehicle in home]
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
        for name in names:  # every message once, in order, on either worker
            assert got[vehicle][name] == sent[name], (vehicle, name)
    served_at_owner = []
    for name in names:
        subscription = during[name]["subscriptions"]["mqtt-subscribers"]
        consumers = {c["consumerName"]: c for c in subscription["consumers"]}
        links = [consumer for consumer in consumers if consumer.startswith(LINK)]
        # The other worker's vehicles are one consumer at the owner: its follower's link ...
        assert len(links) == 1, sorted(consumers)
        assert subscription["consumersCount"] == PER_WORKER + 1
        (owner_home,) = [home for home in homes if set(home) == set(consumers) - set(links)]
        served_at_owner.append(homes.index(owner_home))
        # ... which carried each entry once, however many vehicles it serves.
        assert consumers[links[0]]["msgOutCounter"] == ALERTS
        assert subscription["msgOutCounter"] == ALERTS * (PER_WORKER + 1)
    assert sorted(served_at_owner) == [0, 1]  # each worker followed the other's topic
