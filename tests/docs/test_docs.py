"""Every page of the documentation runs as written: README.md and docs/*.md, each in order, in a
directory and a network namespace of its own (``run_doc.py``), against the brokers the page itself
starts on the addresses it names. A page that stops matching the code fails here.

A block that cannot run here is marked ``<!-- doctest: skip reason="..." -->`` on the page (Docker,
another machine, minutes of run time); ``blocks.py`` lists the directives.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.run_doc import netns_command

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("run_doc.py")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGE_TIMEOUT_S = 240  # under pytest-timeout's 300 s, so the page's own watchdog reports first
#: Pages that take more than a few seconds: brokers restarted, several brokers, CLI runs of seconds.
SLOW = frozenset({"README.md", "docs/cli.md", "docs/security.md", "docs/testing.md"})


@functools.cache
def netns_problem() -> str | None:
    """Why this machine cannot give a page a network namespace of its own; None when it can."""
    try:
        result = subprocess.run([*netns_command(), "true"], capture_output=True, text=True, timeout=30)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        return str(error)
    return None if result.returncode == 0 else f"unshare --net failed: {result.stderr.strip()}"


def page_param(path: Path) -> object:
    name = path.relative_to(ROOT).as_posix()
    marks = [pytest.mark.docs] + ([pytest.mark.slow] if name in SLOW else [])
    return pytest.param(path, id=name, marks=marks)


@pytest.mark.parametrize("page", [page_param(p) for p in PAGES])
def test_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    problem = netns_problem()
    if problem is not None:
        pytest.skip(f"the docs test runs each page in a network namespace of its own: {problem}")
    result = subprocess.run(
        [
            sys.executable,
            str(RUNNER),
            str(page),
            "--workdir",
            str(tmp_path / "page"),
            "--timeout",
            str(PAGE_TIMEOUT_S),
        ],
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT_S + 60,
    )
    summary = result.stdout.rpartition(f"{page.name}: ")[2]
    assert result.returncode == 0, (
        f"{page.name}: {summary}\n(python tests/docs/run_doc.py {page.relative_to(ROOT)} runs it alone)\n"
        + result.stdout[-12000:]
        + result.stderr[-3000:]
    )
