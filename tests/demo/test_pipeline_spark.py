"""The pipeline's transformation on a static DataFrame gives what the reference detector gives."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from magnetar.demo.smart_city.city import build_city
from magnetar.demo.smart_city.detection import reference_alerts
from magnetar.demo.smart_city.pipeline import alerts_of, rule_of
from magnetar.demo.smart_city.settings import CitySettings
from tests.needs import need_spark

need_spark()
pytestmark = pytest.mark.spark  # Spark in this process: one xdist worker for all (tests/conftest.py)

T0 = 1_700_000_001_234


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("smart-city-pipeline-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    yield session
    session.stop()


def test_spark_alerts_match_the_reference_detector(spark):
    settings = CitySettings(
        seed=5, areas=4, damaged_areas=2, vehicles_per_area=2, duration_s=40, damage_start_s=10
    )
    city = build_city(settings)
    records = [r.record(T0) for r in city.readings]
    tick = {"kind": "tick", "device": "clock", "area": "", "ts": T0 + 10**6}
    rows = [(json.dumps(r).encode(), settings.telemetry_topic, {}, None) for r in [*records, tick]]
    # Frames: the flag in the properties, the event time on the message, an opaque value.
    frames = [f.record(T0 + f.send_ms + 77) for f in city.frames]
    assert any(f["damage"] for f in frames)
    for plan, frame in zip(city.frames, frames, strict=True):
        props = {"camera": plan.camera, "area": plan.area, "road-damage": str(plan.damage).lower()}
        when = datetime.fromtimestamp(frame["ts"] / 1000, tz=UTC)
        rows.append((b"\xff\xd8 not json", settings.frames_topic, props, when))
    records += frames
    raw = spark.createDataFrame(
        rows, "value BINARY, topic STRING, properties MAP<STRING, STRING>, event_time TIMESTAMP"
    )
    got = alerts_of(raw, settings).collect()
    expected = reference_alerts(records, rule_of(settings), settings.window_ms)
    assert expected and {a.area for a in expected} == set(city.damaged)
    by_id = {json.loads(row["value"])["alert_id"]: row for row in got}
    assert set(by_id) == {a.alert_id for a in expected}
    for alert in expected:
        row = by_id[alert.alert_id]
        value = json.loads(row["value"])
        assert row["topic"] == settings.alerts_topic(alert.area)
        assert row["key"] == alert.area
        assert row["properties"] == {"alert_id": alert.alert_id, "area": alert.area}
        assert int(row["event_time"].timestamp() * 1000) == alert.trigger_ms
        for name in (
            "trigger_ms",
            "window_start_ms",
            "window_end_ms",
            "vibration_hits",
            "camera_flags",
            "vehicles",
        ):
            assert value[name] == getattr(alert, name), name
        assert value["max_vibration"] == pytest.approx(alert.max_vibration)
        assert value["avg_speed_kmh"] == pytest.approx(alert.avg_speed_kmh, abs=0.051)
