"""The smart-city job's HTML report (demo/smart_city/report.py): from a summary, without running
the job (tests/demo/test_smart_city.py checks the report a real run writes)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from magnetar.demo.smart_city.report import NAME, histogram, report_path, write_report
from magnetar.demo.smart_city.settings import CitySettings
from magnetar.demo.smart_city.summary import Latency, Summary


def summary(**changes) -> Summary:
    latencies = [120.0, 180.0, 240.0, 900.0, 2400.0]
    fields = dict(
        areas=["area-1", "area-2", "area-<3>"],
        damaged_areas=["area-2"],
        vehicles=6,
        sensors=6,
        cameras=3,
        events_in=1000,
        events_by_kind={"reading": 1000},
        events_failed=0,
        spark_rows_read=1000,
        spark_batches=10,
        spark_rows_late=0,
        alerts_out=5,
        alerts_by_area={"area-2": 5},
        duplicate_alerts=0,
        expected_alerts=5,
        missing_alerts=[],
        unexpected_alerts=[],
        receipts=5,
        expected_receipts=5,
        vehicles_missing_alerts=[],
        latency=Latency.of(latencies),
        pipeline_latency=Latency.of(latencies),
        broadcast_latency=Latency.of(latencies),
        frames_sent=0,
        frames_planned=0,
        frames_intact=0,
        frames_corrupt=0,
        frame_bytes=0,
        frame_latency=Latency.of([]),
        wall_s=30.0,
        drained=True,
        latency_samples_ms=latencies,
    )
    return Summary(**(fields | changes))


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def test_the_report_names_every_area_and_draws_the_histogram(tmp_path):
    path = write_report(summary(), tmp_path / "out" / NAME)
    html = path.read_text()
    page = Page()
    page.feed(html)
    text = "".join(page.text)
    for area in ("area-1", "area-2", "area-<3>"):  # the names escaped, read back as they are
        assert area in text
    assert "5 (damaged)" in text and "0 (clean)" in text
    assert page.tags.count("svg") == 2 and "script" not in page.tags
    assert "OK: every check passed" in text
    assert html.count("<rect") >= 3 + 20  # a bar per area, one per latency bin


def test_a_failed_run_says_so_and_a_run_without_receipts_has_no_histogram(tmp_path):
    html = write_report(
        summary(drained=False, receipts=0, latency_samples_ms=[]), tmp_path / NAME
    ).read_text()
    assert "FAILED" in html and "No alert receipts" in html


def test_the_histogram_counts_every_value_once():
    bins = histogram([0.0, 1.0, 5.0, 10.0], bins=5)
    assert [n for _, _, n in bins] == [2, 0, 1, 0, 1] and bins[-1][1] == 10.0
    assert histogram([]) == []


def test_where_the_report_goes(tmp_path):
    assert report_path(CitySettings(report=str(tmp_path / "r.html"))) == tmp_path / "r.html"
    assert report_path(CitySettings(work_dir=str(tmp_path))) == tmp_path / NAME
    assert report_path(CitySettings()).name == NAME and report_path(CitySettings()).parent != Path(".")
