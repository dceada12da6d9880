"""``--districts 2``, end to end: two district edge brokers replicate their raw telemetry into a
central broker where the Spark pipeline reads; the alerts it writes replicate back to the districts'
edges, where their vehicles receive them. Exactly once into central, every alert back."""

from __future__ import annotations

import dataclasses
import io

import pytest

from magnetar.demo.smart_city.run import run_job
from magnetar.demo.smart_city.settings import CitySettings
from tests.needs import need_spark

need_spark()
pytestmark = pytest.mark.spark  # Spark in this process: one xdist worker for all (tests/conftest.py)

# Two areas, both damaged: area-1 in district-1, area-2 in district-2, so each district has alerts.
SMALL = CitySettings(
    seed=7,
    areas=2,
    damaged_areas=2,
    vehicles_per_area=2,
    sensors_per_area=2,
    duration_s=8,
    damage_start_s=3,
    frames=0,
    window_s=2,
    watermark_s=1,
    progress_interval_s=2,
    drain_timeout_s=60,
    districts=2,
)


@pytest.mark.timeout(240)
def test_two_districts_replicate_into_central_and_get_alerts_back():
    out = io.StringIO()
    summary = run_job(SMALL, out)
    text = out.getvalue()
    assert summary.drained and not summary.errors, text
    assert [d.name for d in summary.districts] == ["district-1", "district-2"], text
    produced = 0
    for district in summary.districts:
        # Exactly once into central: every reading the district's edge took, once.
        assert district.produced > 0, text
        assert district.received_total == district.received_unique == district.produced, text
        assert district.lag.drained_within_s is not None and district.lag.backlog_final == 0, text
        # The alerts of its areas came back to its edge, to every one of its vehicles.
        assert district.alerts_expected >= 1, text
        assert district.alerts_back == district.alerts_expected, text
        assert district.vehicles_missing == 0, text
        produced += district.produced
    assert produced == summary.events_in and summary.events_failed == 0
    assert summary.spark_rows_read >= summary.events_in
    assert not summary.missing_alerts and not summary.unexpected_alerts and not summary.duplicate_alerts, text
    assert summary.receipts == summary.expected_receipts == 2 * summary.alerts_out, text
    assert "exactly once" in text and "replicationBacklog" in text and "drained within" in text, text
    assert summary.ok, text


def test_districts_are_checked():
    with pytest.raises(ValueError, match="districts"):
        CitySettings.from_values({"districts": 3, "areas": 2})
    with pytest.raises(ValueError, match="secure"):
        CitySettings.from_values({"districts": 2, "secure": True})
    assert dataclasses.replace(SMALL, districts=1).districts == 1
