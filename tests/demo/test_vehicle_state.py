"""The vehicle state topic against an embedded broker (no Spark): every report in, compacted to one
message per vehicle, read back as a table view holding each vehicle's last report; a value that is
not a vehicle's last report is caught."""

from __future__ import annotations

import asyncio
import json

import pytest

from magnetar.client import aio
from magnetar.demo.smart_city.broker import EmbeddedBroker
from magnetar.demo.smart_city.runtime import BROKER_SETTINGS
from magnetar.demo.smart_city.security import Admin
from magnetar.demo.smart_city.vehicle_state import VehicleState, VehicleStateReport, compact


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("vehicle-state"), BROKER_SETTINGS) as broker:
        yield broker


def _report(vehicle: str, area: str, speed: float) -> bytes:
    return json.dumps({"kind": "vehicle", "device": vehicle, "area": area, "speed_kmh": speed}).encode()


def test_the_table_view_holds_each_vehicles_last_report(broker):
    topic = "persistent://public/default/vehicle-state-last"

    async def scenario() -> VehicleStateReport:
        async with aio.Client(broker.service_url) as client:
            state = VehicleState(topic, client)
            await state.open()
            for i in range(30):
                vehicle = f"vehicle-{i % 4}"
                await state.report(vehicle, _report(vehicle, f"area-{i % 2}", float(i)))
            await state.close()
            seconds = await asyncio.to_thread(compact, Admin(broker.admin_url), topic)  # blocking HTTP
            return await state.read_back(seconds)

    report = asyncio.run(scenario())
    assert (report.reports, report.failed, report.vehicles) == (30, 0, 4)
    assert report.compacted_messages == 4 and report.keys == 4  # one message per vehicle
    assert report.mismatched == [] and report.ok
    assert report.rows[0] == ("vehicle-0", json.loads(_report("vehicle-0", "area-0", 28.0)))
    lines = report.lines()
    assert "30 reports compacted to 4 messages" in lines[0]
    assert "4 keys for 4 vehicles, each its last report; vehicle-0 area-0 28.0 km/h" in lines[1]


def test_a_value_that_is_not_the_vehicles_last_report_is_caught(broker):
    topic = "persistent://public/default/vehicle-state-wrong"

    async def scenario() -> VehicleStateReport:
        async with aio.Client(broker.service_url) as client:
            state = VehicleState(topic, client)
            await state.open()
            for vehicle in ("vehicle-a", "vehicle-b"):
                await state.report(vehicle, _report(vehicle, "area-1", 10.0))
            await state.close()
            other = await client.create_producer(topic)  # someone else's report for vehicle-b
            await other.send(_report("vehicle-b", "area-9", 99.0), partition_key="vehicle-b")
            await other.close()
            seconds = await asyncio.to_thread(compact, Admin(broker.admin_url), topic)
            return await state.read_back(seconds)

    report = asyncio.run(scenario())
    assert report.mismatched == ["vehicle-b"] and not report.ok
    assert "1 wrong: vehicle-b" in report.lines()[1]
