"""The job's broker-facing parts with our client against an embedded broker (no Spark):
the simulator's topics, the alert fan-out to every vehicle of an area, the frame verifier."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from magnetar.client import aio
from magnetar.demo.smart_city.broker import EmbeddedBroker
from magnetar.demo.smart_city.city import VEHICLE, build_city
from magnetar.demo.smart_city.detection import Alert
from magnetar.demo.smart_city.fanout import AlertFanout
from magnetar.demo.smart_city.frames import FrameVerifier
from magnetar.demo.smart_city.runtime import BROKER_SETTINGS
from magnetar.demo.smart_city.security import Admin
from magnetar.demo.smart_city.settings import MIB, CitySettings
from magnetar.demo.smart_city.simulator import Simulator
from tests.waiting import eventually_async

SETTINGS = CitySettings(
    areas=3,
    damaged_areas=1,
    vehicles_per_area=3,
    sensors_per_area=1,
    duration_s=3,
    damage_start_s=1,
    frames=2,
    frame_min_bytes=5 * MIB + 100,
    frame_max_bytes=5 * MIB + 200_000,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("smart-city"), BROKER_SETTINGS) as broker:
        yield broker


def alert(area: str, start: int) -> Alert:
    return Alert(area, start, start + 5000, start + 1200, 3, 1, 5.5, 3, 21.0)


def test_every_vehicle_in_an_area_gets_its_alerts(broker):
    settings = dataclasses.replace(SETTINGS, namespace="public/default", seed=1)
    city = build_city(settings)
    damaged, clean = sorted(city.damaged)[0], city.clean

    async def scenario():
        async with aio.Client(broker.service_url) as client:
            fanout = AlertFanout(settings, city, client)
            await fanout.start()
            producer = await client.create_producer(settings.alerts_topic(damaged))
            sent = [alert(damaged, 1_700_000_000_000 + i * 5000) for i in range(3)]
            for a in sent:
                await producer.send(a.to_json(), event_timestamp=a.trigger_ms)
            # A last alert, after which nothing may come: once every vehicle and the control room
            # has it, each has had everything before it, and a copy or a stray would be there.
            last = alert(damaged, 1_700_000_000_000 + 3 * 5000)
            await producer.send(last.to_json(), event_timestamp=last.trigger_ms)
            vehicles = [v for v in city.devices_of(VEHICLE) if v.area == damaged]

            def everyone_has_the_last() -> bool:
                have = {r.vehicle for r in fanout.receipts if r.alert_id == last.alert_id}
                return have == {v.id for v in vehicles} and last.alert_id in fanout.control_room.alerts

            await eventually_async(everyone_has_the_last, timeout=20, what="the last alert everywhere")
            await fanout.stop()
            return fanout, [*sent, last], vehicles

    fanout, sent, vehicles = asyncio.run(scenario())
    got = {(r.vehicle, r.alert_id) for r in fanout.receipts}
    assert got == {(v.id, a.alert_id) for v in vehicles for a in sent}
    assert len(fanout.receipts) == len(got)
    assert not any(r.area in clean for r in fanout.receipts)
    assert set(fanout.control_room.alerts) == {a.alert_id for a in sent}
    assert fanout.control_room.duplicates == 0 and not fanout.errors
    for r in fanout.receipts:
        assert r.broadcast_ms >= 0 and r.latency_ms == r.pipeline_ms + r.broadcast_ms


@pytest.mark.slow
def test_simulator_publishes_the_plan_and_frames_arrive_intact(broker):
    settings = dataclasses.replace(SETTINGS, namespace="public/default", seed=2, partitions=2)
    settings = dataclasses.replace(settings, namespace="public/sim")
    _create_namespace(broker.admin_url, "public/sim")
    Admin(broker.admin_url).create_partitioned_topic(settings.telemetry_topic, settings.partitions)
    city = build_city(settings)

    async def scenario():
        async with aio.Client(broker.service_url) as client:
            verifier = FrameVerifier(settings, client)
            await verifier.start()
            telemetry = await client.subscribe(
                settings.telemetry_topic, "check", initial_position=aio.InitialPosition.Earliest
            )
            simulator = Simulator(settings, city, client)
            await simulator.run()
            records = []
            expected = len(city.readings) + settings.partitions
            while len(records) < expected:
                msg = await telemetry.receive(10_000)
                records.append((json.loads(msg.data()), msg.event_timestamp(), msg.partition_key()))
            await eventually_async(
                lambda: len(verifier.checks) >= len(city.frames), timeout=20, what="every frame checked"
            )
            await verifier.stop()
            return simulator, records, verifier

    simulator, records, verifier = asyncio.run(scenario())
    c = simulator.counters
    assert c.events_sent == len(city.readings) and c.events_failed == 0
    assert c.ticks_sent == settings.partitions and c.frames_sent == len(city.frames)
    planned = sorted(
        (json.dumps(r.record(simulator.start_ms), sort_keys=True) for r in city.readings), key=str
    )
    device_records = [rec for rec, _, _ in records if rec["kind"] != "tick"]
    assert sorted((json.dumps(r, sort_keys=True) for r in device_records), key=str) == planned
    for rec, event_time, key in records:
        assert event_time == rec["ts"]
        if rec["kind"] != "tick":
            assert key == rec["area"]
    ticks = [rec for rec, _, _ in records if rec["kind"] == "tick"]
    last_event = max(r["ts"] for r in device_records)
    assert all(t["ts"] > last_event + (settings.window_s + settings.watermark_s) * 1000 for t in ticks)
    assert sorted(ch.index for ch in verifier.checks) == [0, 1]
    assert all(ch.intact and ch.size > 5 * MIB for ch in verifier.checks)
    assert [ch.road_damage for ch in sorted(verifier.checks, key=lambda ch: ch.index)] == [
        f.damage for f in city.frames
    ]


def test_verifier_flags_a_frame_whose_bytes_do_not_match(broker):
    settings = dataclasses.replace(SETTINGS, namespace="public/default")
    settings = dataclasses.replace(settings, namespace="public/corrupt")
    _create_namespace(broker.admin_url, "public/corrupt")

    async def scenario():
        async with aio.Client(broker.service_url) as client:
            verifier = FrameVerifier(settings, client)
            await verifier.start()
            producer = await client.create_producer(settings.frames_topic, chunking_enabled=True)
            frame = build_city(settings).frames[0]
            content = frame.content()
            props = frame.properties(content)
            await producer.send(content, properties=props)
            await producer.send(content[:-1] + b"\x00", properties=props)
            await eventually_async(lambda: len(verifier.checks) >= 2, timeout=20, what="both frames checked")
            await verifier.stop()
            return verifier

    verifier = asyncio.run(scenario())
    assert [ch.intact for ch in verifier.checks] == [True, False]
    assert verifier.intact == 1 and verifier.corrupt == 1


def _create_namespace(admin_url: str, namespace: str) -> None:
    import urllib.request

    request = urllib.request.Request(f"{admin_url}/admin/v2/namespaces/{namespace}", data=b"", method="PUT")
    with urllib.request.urlopen(request, timeout=10):
        pass
