"""Where a hung test was, also under xdist.

pytest-timeout's thread method ends a test that outlives ``timeout`` by printing every thread's
stack and ending the process: under xdist that process is a worker, whose output is not shown, so
the report says only "worker 'gw1' crashed while running ...". Here each xdist worker has
``faulthandler`` write every thread's stack to a file of its own ``MARGIN_S`` before the test's
timeout (halfway through a short one), a file removed when the test ends, so one is left only by
a worker that died in it; the controller shows what such files hold at the end of the run.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Where the workers write (a folder per run, made by the controller; not ``MAGNETAR_``: the
#: brokers the tests start read those as settings).
ENV = "PYTEST_HANG_DUMPS"
#: How long before the test's timeout its stacks are written.
MARGIN_S = 10.0


def start(config: pytest.Config) -> None:
    """In the controller (or a run without xdist): the run's folder, for the workers it starts."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        os.environ[ENV] = tempfile.mkdtemp(prefix="pytest-hangs-")


def timeout_of(item: pytest.Item) -> float:
    """The test's pytest-timeout: its ``timeout`` marker's, else ``--timeout``, else the ini's."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    given = item.config.getoption("timeout", None) or item.config.getini("timeout")
    return float(given or 0)


@contextlib.contextmanager
def armed(item: pytest.Item) -> Iterator[None]:
    """While ``item`` runs in an xdist worker: its stacks written to the worker's file
    ``MARGIN_S`` before its timeout; the file removed if the test ends."""
    folder, worker = os.environ.get(ENV), os.environ.get("PYTEST_XDIST_WORKER")
    timeout = timeout_of(item)
    if folder is None or worker is None or timeout <= 0:
        yield
        return
    at = max(timeout - MARGIN_S, timeout / 2)
    path = Path(folder) / f"{worker}.txt"
    with open(path, "w") as file:
        file.write(f"{item.nodeid}: every thread's stack {at:.1f} s into the test\n")
        file.flush()
        faulthandler.dump_traceback_later(at, file=file)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
    path.unlink(missing_ok=True)


def report(terminal: pytest.TerminalReporter) -> None:
    """In the controller: what the workers that died in a test wrote, then the folder gone."""
    folder = os.environ.get(ENV)
    if folder is None or os.environ.get("PYTEST_XDIST_WORKER") is not None:
        return
    for path in sorted(Path(folder).glob("*.txt")):
        terminal.write_sep("=", f"stacks of a test that hung ({path.stem})")
        terminal.write_line(path.read_text(errors="replace"))
    shutil.rmtree(folder, ignore_errors=True)
