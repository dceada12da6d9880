"""Many MQTT subscribers of one topic served by one broadcast subscription (docs/mqtt.md,
Sessions and delivery; docs/topics-and-subscriptions.md, Broadcast): an area's alert reaches 200
MQTT vehicles (gmqtt, 3.1.1 and 5.0) as it reaches a Pulsar broadcast consumer, each getting
every message once, in order, from entries read once for all of them."""

from __future__ import annotations

import asyncio

import pulsar
import pytest

from ..waiting import eventually_async
from .support import admin_call
from .test_mqtt import pulsar_name, unique

VEHICLES = 200
ALERTS = 40


@pytest.fixture
def mqtt_broker(broker_factory):
    return broker_factory({"mqtt_port": 0})


def stats(broker, mqtt_name: str) -> dict:
    local = pulsar_name(mqtt_name).split("/", 5)[-1].replace("%", "%25")
    status, body = admin_call(broker, "GET", f"/admin/v2/persistent/public/default/{local}/stats")
    assert status == 200, body
    return body


@pytest.mark.slow
def test_an_alert_reaches_every_vehicle_once_in_order_from_one_read(mqtt_broker, client_factory):
    import gmqtt

    name = unique("city/area-7/alerts")
    client = client_factory(mqtt_broker.service_url)
    pulsar_vehicle = client.subscribe(
        pulsar_name(name),
        "pulsar-vehicles",
        consumer_type=pulsar.ConsumerType.Exclusive,
        properties={"magnetar.subscription.type": "Broadcast"},
    )
    producer = client.create_producer(pulsar_name(name))
    alerts = [f"alert-{i}".encode() for i in range(ALERTS)]
    during: dict = {}
    delivered: dict = {}

    async def run() -> list[list[bytes]]:
        got: list[list[bytes]] = [[] for _ in range(VEHICLES)]
        subscribed = [asyncio.Event() for _ in range(VEHICLES)]
        vehicles = []
        for index in range(VEHICLES):
            mqtt = gmqtt.Client(f"vehicle-{index}")
            mqtt.on_message = lambda c, t, payload, q, p, i=index: got[i].append(payload) or 0
            mqtt.on_subscribe = lambda *args, e=subscribed[index]: e.set()
            await mqtt.connect("127.0.0.1", mqtt_broker.mqtt_port, version=4 if index % 2 else 5)
            mqtt.subscribe(name, qos=1)
            vehicles.append(mqtt)
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in subscribed)), 60)
        during.update(await asyncio.to_thread(stats, mqtt_broker, name))

        def publish() -> None:
            for alert in alerts:
                producer.send_async(alert, None)
            producer.flush()

        await asyncio.to_thread(publish)
        await eventually_async(
            lambda: all(len(g) >= ALERTS for g in got), timeout=60, what="every alert at every vehicle"
        )
        delivered.update(await asyncio.to_thread(stats, mqtt_broker, name))
        for mqtt in vehicles:
            await mqtt.disconnect()
        return got

    got = asyncio.run(run())
    assert all(g == alerts for g in got)  # every message once, in order, at each of them
    subscription = during["subscriptions"]["mqtt-subscribers"]
    assert subscription["type"] == "Broadcast" and subscription["consumersCount"] == VEHICLES
    # each entry read once for all 200 (batches make fewer entries than alerts)
    assert 0 < delivered["subscriptions"]["mqtt-subscribers"]["dispatcher"]["entriesRead"] <= ALERTS
    assert [pulsar_vehicle.receive(10_000).data() for _ in alerts] == alerts  # as a Pulsar consumer gets it
    # non-durable: the subscription went with its last vehicle
    assert "mqtt-subscribers" not in stats(mqtt_broker, name)["subscriptions"]
