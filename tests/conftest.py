"""Suite-wide rules.

Under ``CI=true`` a skip is a failure: a test that cannot run on the CI machine (no Java, no
pyspark, ...) must not let the run pass without it. Locally a skip stays a skip.
"""

from __future__ import annotations

import os

import pytest

CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _reason(longrepr: object) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    outcome = yield
    report = outcome.get_result()
    if CI and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which must run everything: {_reason(report.longrepr)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which must run everything: {_reason(report.longrepr)}"
