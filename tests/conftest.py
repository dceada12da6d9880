"""Suite-wide rules.

Under ``CI=true`` a skip is a failure: a test that cannot run on the CI machine (no Java, no
pyspark, ...) must not let the run pass without it. Locally a skip stays a skip.

``make test`` runs the suite on two pytest-xdist workers, a test file at a time
(``-n 2 --dist loadfile``). A process has one SparkSession, and the demos stop theirs when they
end, so the files that run Spark in the test process (``tests/spark/`` and the modules marked
``spark``) go to one worker together, as one unit, in the serial run's order; the units go out
longest first, as guessed from the ``slow`` markers (tests/xdist_order.py). Every test of those
files is marked ``spark`` here, so that ``-m "not spark"`` (``make test-quick``) leaves them all out.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from magnetar import broker_process

CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def pytest_configure(config: pytest.Config) -> None:
    """Handle SIGINT as a terminal's foreground command does, also in a run started with it ignored
    (a background job of a script, ``pytest ... &``). An ignored signal stays ignored in every
    child process, so a ``magnetar consume -n 0`` that a test stops with Ctrl-C would never see it;
    a handled one is reset to the default in a child, which Python turns into KeyboardInterrupt."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Brokers forked from a process that imported the broker once: ~0.5 s of CPU less a start,
    # for some 400 starts (docs/testing.md). PYTEST_FRESH_BROKERS=1 starts each afresh.
    if os.environ.get("PYTEST_FRESH_BROKERS", "") != "1":
        broker_process.start_from_launcher(True)
    if (dumps := _hang_dumps()) is not None:
        dumps.start(config)


def _hang_dumps() -> Any:
    """tests/hang_dumps.py; None where this file runs as another suite's conftest, without the
    ``tests`` package (tests/test_ci_skips.py copies it)."""
    try:
        from tests import hang_dumps
    except ImportError:
        return None
    return hang_dumps


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Under xdist, a test's stacks are written shortly before its timeout (tests/hang_dumps.py)."""
    dumps = _hang_dumps()
    if dumps is None:
        yield
        return
    with dumps.armed(item):
        yield


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if (dumps := _hang_dumps()) is not None:
        dumps.report(terminalreporter)


#: The files that run Spark in the test process; a module marked ``spark`` must be one of them.
SPARK_IN_PROCESS = ("tests/spark/", "tests/demo/test_pipeline_spark.py", "tests/demo/test_smart_city")


def runs_spark(nodeid: str) -> bool:
    return nodeid.startswith(SPARK_IN_PROCESS)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by the markers added here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unlisted = {
        i.nodeid.split("::")[0] for i in items if i.get_closest_marker("spark") and not runs_spark(i.nodeid)
    }
    if unlisted:
        raise pytest.UsageError(
            f"marked spark, missing from tests/conftest.py SPARK_IN_PROCESS: {sorted(unlisted)}"
        )
    for item in items:
        if runs_spark(item.nodeid) and not item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.spark)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with every Spark file in one unit (xdist's loadgroup does not group
    under pytest 9.2, whose node ids it can no longer rename), the longest units first
    (tests/xdist_order.py), so that no long file is left for last while the other worker idles, and
    a run that goes on when a worker dies (tests/xdist_scheduler.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.xdist_scheduler import LongestFirst

    class SparkTogether(LongestFirst):
        def _split_scope(self, nodeid: str) -> str:
            return "spark" if runs_spark(nodeid) else super()._split_scope(nodeid)

    return SparkTogether(config, log)


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
