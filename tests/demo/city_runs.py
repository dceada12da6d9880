"""What the small end-to-end runs of the smart-city job share: their settings, a run in a work
directory of the test's own (so that its broker's log and secrets can be read after), and the
broker's ``listening on`` line."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

from magnetar.demo.smart_city.run import run_job
from magnetar.demo.smart_city.settings import MIB, CitySettings
from magnetar.demo.smart_city.summary import Summary

#: Two areas, one damaged, one frame: eight seconds of traffic.
TWO_AREAS = CitySettings(
    seed=7,
    areas=2,
    damaged_areas=1,
    vehicles_per_area=2,
    sensors_per_area=2,
    duration_s=8,
    damage_start_s=3,
    frames=1,
    frame_min_bytes=5 * MIB + 1,
    frame_max_bytes=5 * MIB + 100_000,
    window_s=2,
    watermark_s=1,
    progress_interval_s=2,
    drain_timeout_s=60,
)


def run_in(settings: CitySettings, tmp_path: Path) -> tuple[Summary, str]:
    """The summary and printed output of a run of ``settings`` working in ``tmp_path / "work"``."""
    out = io.StringIO()
    summary = run_job(dataclasses.replace(settings, work_dir=str(tmp_path / "work")), out)
    return summary, out.getvalue()


def listening_line(tmp_path: Path) -> str:
    """The broker's log line naming the addresses it listens on, of a run made by ``run_in``."""
    log = (tmp_path / "work/broker/broker.log").read_text()
    return next(line for line in log.splitlines() if "listening on" in line)
