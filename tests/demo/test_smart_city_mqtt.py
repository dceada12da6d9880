"""``--mqtt``: the vehicles are MQTT clients (paho-mqtt) of the broker's MQTT port; they publish
their telemetry at QoS 1 into the telemetry topic's partitions and receive their area's alerts
over MQTT; Spark reads their readings with everything else, and every vehicle gets every alert
of its area. ``--mqtt --secure``: over mqtts:// with each vehicle's token as its password, a
vehicle refused another area's alerts (SUBACK 0x87)."""

from __future__ import annotations

import dataclasses
import io

import pytest

from magnetar.demo.smart_city.run import run_job
from magnetar.demo.smart_city.settings import MIB, CitySettings
from tests.needs import need_spark

need_spark()
# Spark in this process: one xdist worker for all (tests/conftest.py); slow: a minute or more each.
pytestmark = [pytest.mark.spark, pytest.mark.slow]

SMALL_MQTT = CitySettings(
    seed=11,
    areas=2,
    damaged_areas=1,
    vehicles_per_area=3,
    sensors_per_area=2,
    duration_s=10,
    damage_start_s=3,
    frames=1,
    frame_min_bytes=5 * MIB + 1,
    frame_max_bytes=5 * MIB + 100_000,
    window_s=2,
    watermark_s=1,
    progress_interval_s=2,
    drain_timeout_s=60,
    mqtt=True,
)


def vehicle_readings(summary) -> int:
    return summary.events_by_kind.get("vehicle", 0)


@pytest.mark.timeout(240)
def test_vehicles_publish_and_receive_alerts_over_mqtt(tmp_path):
    out = io.StringIO()
    summary = run_job(dataclasses.replace(SMALL_MQTT, work_dir=str(tmp_path / "work")), out)
    text = out.getvalue()

    assert summary.ok and not summary.errors, text
    assert "vehicles on mqtt://127.0.0.1:" in text, text
    assert vehicle_readings(summary) > 0 and summary.events_failed == 0, text
    assert f"{vehicle_readings(summary):,} readings PUBACKed" in summary.mqtt, text  # every one stored
    assert summary.spark_rows_read >= summary.events_in, text  # the MQTT readings were read too
    (damaged,) = summary.damaged_areas
    assert summary.alerts_by_area.get(damaged, 0) >= 1, text
    assert not summary.vehicles_missing_alerts and summary.receipts == summary.expected_receipts, text
    assert summary.broadcast_latency.count == summary.receipts  # each receipt split at the publish time
    listening = next(
        line
        for line in (tmp_path / "work/broker/broker.log").read_text().splitlines()
        if "listening on" in line
    )
    assert "mqtt://" in listening, listening


@pytest.mark.timeout(240)
def test_vehicles_over_mqtt_with_two_broker_workers():
    """``--mqtt --workers 2``: the telemetry's partitions and the alert topics are spread over two
    workers; the vehicles' MQTT port is the broker's one, and reaches every one of them."""
    out = io.StringIO()
    summary = run_job(dataclasses.replace(SMALL_MQTT, workers=2), out)
    text = out.getvalue()

    assert summary.ok and not summary.errors, text
    assert "2 workers" in text and "vehicles on mqtt://127.0.0.1:" in text, text
    assert vehicle_readings(summary) > 0 and summary.events_failed == 0, text
    assert f"{vehicle_readings(summary):,} readings PUBACKed" in summary.mqtt, text
    assert summary.spark_rows_read >= summary.events_in, text
    assert not summary.vehicles_missing_alerts and summary.receipts == summary.expected_receipts, text


@pytest.mark.timeout(240)
def test_secured_vehicles_over_mqtts_with_their_tokens():
    out = io.StringIO()
    summary = run_job(dataclasses.replace(SMALL_MQTT, secure=True), out)
    text = out.getvalue()

    assert summary.ok and not summary.errors, text
    assert "vehicles on mqtts://127.0.0.1:" in text, text
    assert summary.refused and "SUBACK 0x87 Not authorized" in summary.refusal, text
    assert vehicle_readings(summary) > 0 and summary.events_failed == 0, text
    assert not summary.vehicles_missing_alerts and summary.receipts == summary.expected_receipts, text
