"""``--mqtt``: the vehicles are MQTT clients (paho-mqtt) of the broker's MQTT port; they publish
their telemetry at QoS 1 into the telemetry topic's partitions and receive their area's alerts
over MQTT; Spark reads their readings with everything else, and every vehicle gets every alert
of its area. ``--mqtt --secure``: over mqtts:// with each vehicle's token as its password, a
vehicle refused another area's alerts (SUBACK 0x87)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.demo.city_runs import TWO_AREAS, listening_line, run_in
from tests.needs import need_spark

need_spark()
# Spark in this process: one xdist worker for all (tests/conftest.py); slow: a minute or more each.
pytestmark = [pytest.mark.spark, pytest.mark.slow]

SMALL_MQTT = dataclasses.replace(TWO_AREAS, seed=11, vehicles_per_area=3, mqtt=True)


def vehicle_readings(summary) -> int:
    return summary.events_by_kind.get("vehicle", 0)


@pytest.mark.timeout(240)
def test_vehicles_publish_and_receive_alerts_over_mqtt(tmp_path):
    summary, text = run_in(SMALL_MQTT, tmp_path)

    assert summary.ok and not summary.errors, text
    assert "vehicles on mqtt://127.0.0.1:" in text, text
    assert vehicle_readings(summary) > 0 and summary.events_failed == 0, text
    assert f"{vehicle_readings(summary):,} readings PUBACKed" in summary.mqtt, text  # every one stored
    assert summary.spark_rows_read >= summary.events_in, text  # the MQTT readings were read too
    (damaged,) = summary.damaged_areas
    assert summary.alerts_by_area.get(damaged, 0) >= 1, text
    assert not summary.vehicles_missing_alerts and summary.receipts == summary.expected_receipts, text
    assert summary.broadcast_latency.count == summary.receipts  # each receipt split at the publish time
    listening = listening_line(tmp_path)
    assert "mqtt://" in listening, listening


@pytest.mark.timeout(240)
def test_vehicles_over_mqtt_with_two_broker_workers(tmp_path):
    """``--mqtt --workers 2``: the telemetry's partitions and the alert topics are spread over two
    workers; the vehicles' MQTT port is the broker's one, and reaches every one of them."""
    summary, text = run_in(dataclasses.replace(SMALL_MQTT, workers=2), tmp_path)

    assert summary.ok and not summary.errors, text
    assert "2 workers" in text and "vehicles on mqtt://127.0.0.1:" in text, text
    assert vehicle_readings(summary) > 0 and summary.events_failed == 0, text
    assert f"{vehicle_readings(summary):,} readings PUBACKed" in summary.mqtt, text
    assert summary.spark_rows_read >= summary.events_in, text
    assert not summary.vehicles_missing_alerts and summary.receipts == summary.expected_receipts, text


@pytest.mark.timeout(240)
def test_secured_vehicles_over_mqtts_with_their_tokens(tmp_path):
    summary, text = run_in(dataclasses.replace(SMALL_MQTT, secure=True), tmp_path)

    assert summary.ok and not summary.errors, text
    assert "vehicles on mqtts://127.0.0.1:" in text, text
    assert summary.refused and "SUBACK 0x87 Not authorized" in summary.refusal, text
    assert vehicle_readings(summary) > 0 and summary.events_failed == 0, text
    assert not summary.vehicles_missing_alerts and summary.receipts == summary.expected_receipts, text
