"""A small run of the main job, end to end: embedded broker, simulator, Spark pipeline through
the magnetar source and sink, alert fan-out to every vehicle, frame verifier, summary."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from magnetar.demo.smart_city.run import run_job
from magnetar.demo.smart_city.settings import MIB, CitySettings
from tests.needs import need_spark

need_spark()
pytestmark = pytest.mark.spark  # Spark in this process: one xdist worker for all (tests/conftest.py)

SMALL = CitySettings(
    seed=7,
    areas=3,
    damaged_areas=1,
    vehicles_per_area=2,
    sensors_per_area=2,
    duration_s=8,
    damage_start_s=3,
    frames=2,
    frame_min_bytes=5 * MIB + 1,
    frame_max_bytes=5 * MIB + 300_000,
    window_s=2,
    watermark_s=1,
    progress_interval_s=2,
    drain_timeout_s=60,
)


@pytest.mark.timeout(240)
def test_small_run_of_the_main_job():
    out = io.StringIO()
    summary = run_job(SMALL, out)
    a_good_run(summary, out.getvalue())


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_main_job_with_two_broker_workers_runs_as_with_one():
    """``--workers 2``: the job's topics are served by whichever of two broker processes owns their
    bundle (its clients and Spark follow the LOOKUP answers); the run meets the same checks."""
    out = io.StringIO()
    summary = run_job(dataclasses.replace(SMALL, workers=2), out)
    text = out.getvalue()
    assert "2 workers" in text, text
    a_good_run(summary, text)


def a_good_run(summary, text: str) -> None:
    """What every run of SMALL must show, however its broker runs."""
    assert "events in" in text and "Smart city — summary" in text, text
    a_report_of_every_area(summary, text)

    assert summary.drained and not summary.errors, text
    assert summary.events_in > 0 and summary.events_failed == 0
    assert summary.spark_rows_read >= summary.events_in
    # Alerts for the damaged area, none for the clean ones, exactly what the reference detector says.
    (damaged,) = summary.damaged_areas
    assert summary.alerts_by_area.get(damaged, 0) >= 1, text
    assert summary.clean_area_alerts == 0, text
    assert not summary.missing_alerts and not summary.unexpected_alerts, text
    assert summary.duplicate_alerts == 0
    # Every vehicle of the damaged area got every alert of its area.
    assert not summary.vehicles_missing_alerts, text
    assert summary.receipts == summary.expected_receipts == 2 * summary.alerts_out
    # Every large frame arrived whole.
    assert summary.frames_intact == summary.frames_sent == summary.frames_planned == 2
    assert summary.frames_corrupt == 0
    # Latency figures.
    for latency in (summary.latency, summary.pipeline_latency, summary.broadcast_latency):
        assert latency.count == summary.receipts
        assert None not in (latency.p50, latency.p95, latency.p99)
        assert 0 <= latency.p50 <= latency.p95 <= latency.p99
    assert "p50" in text and "p99" in text
    # The compacted topic of the latest state per vehicle, read back as a table view.
    state = summary.vehicle_state
    assert state is not None, text
    assert state.vehicles == state.keys == state.compacted_messages == summary.vehicles == 6, text
    assert state.reports == summary.events_by_kind["vehicle"] and not state.mismatched, text
    assert "table view        6 keys for 6 vehicles, each its last report" in text
    assert summary.ok


def a_report_of_every_area(summary, text: str) -> None:
    """The HTML report the run printed the path of: there, naming every area and its alerts."""
    (line,) = [line for line in text.splitlines() if line.strip().startswith("report ")]
    report = Path(line.split(None, 1)[1].strip())
    try:
        html = report.read_text()
        for area in summary.areas:
            assert f"{area} (" in html or f">{area}<" in html, area
        for area in summary.damaged_areas:
            assert f"{summary.alerts_by_area[area]} (damaged)" in html
        assert "Latency of the alert receipts" in html and html.count("<svg") == 2
    finally:
        report.unlink(missing_ok=True)
