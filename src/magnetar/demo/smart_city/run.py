"""Which job a run is: ``Job`` on one broker, or ``DistrictJob`` (``--districts N``) on a central
broker and N edges; both print their progress and summary."""

from __future__ import annotations

import sys
from typing import TextIO

from magnetar.demo.smart_city.district_job import DistrictJob
from magnetar.demo.smart_city.job import Job
from magnetar.demo.smart_city.report import report_path, write_report
from magnetar.demo.smart_city.settings import CitySettings
from magnetar.demo.smart_city.summary import Summary


def run_job(settings: CitySettings, out: TextIO = sys.stdout) -> Summary:
    """Run the whole job and print its progress and summary to ``out``; returns the summary."""
    job = DistrictJob(settings, out) if settings.districts > 1 else Job(settings, out)
    summary = job.run()
    job.say(summary.render())
    path = write_report(summary, report_path(settings))
    job.say(f"  report              {path}")
    return summary
