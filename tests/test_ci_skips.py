"""Under CI=true a skipped test or module fails the run; locally it stays a skip. A test left out by
``-m`` (``make test-quick``) is deselected, not skipped: that is no failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SKIPPING = """
import pytest

def test_skips_inside():
    pytest.skip("needs a thing this machine lacks")
"""

SKIPPING_MODULE = """
import pytest

pytest.skip("needs Java", allow_module_level=True)

def test_never_collected():
    pass
"""


SLOW_AND_QUICK = """
import pytest

@pytest.mark.slow
def test_slow():
    pass

def test_quick():
    pass
"""

#: The repository's markers, strict as there: ``slow`` must be known.
PYTEST_INI = """
[pytest]
addopts = --strict-markers
markers =
    slow: seconds each
    spark: Spark in the test process
"""


def _run(tmp_path: Path, ci: str | None, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text(PYTEST_INI)
    (tmp_path / "test_skipping.py").write_text(module)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            *args,
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("module", "reason"), [(SKIPPING, "needs a thing this machine lacks"), (SKIPPING_MODULE, "needs Java")]
)
def test_skips_fail_under_ci(tmp_path, module, reason):
    result = _run(tmp_path, "true", module)
    assert result.returncode != 0, result.stdout
    assert f"skipped under CI=true, which must run everything: Skipped: {reason}" in result.stdout


@pytest.mark.parametrize("ci", [None, "", "false"])
@pytest.mark.parametrize("module", [SKIPPING, SKIPPING_MODULE])
def test_skips_stay_skips_elsewhere(tmp_path, ci, module):
    result = _run(tmp_path, ci, module)
    assert result.returncode in (0, 5), result.stdout  # 5: nothing left to run, still no failure
    assert "1 skipped" in result.stdout and "failed" not in result.stdout


def test_a_test_left_out_by_a_marker_is_deselected_not_skipped_under_ci(tmp_path):
    result = _run(tmp_path, "true", SLOW_AND_QUICK, "-m", "not slow and not spark")
    assert result.returncode == 0, result.stdout
    assert "1 passed, 1 deselected" in result.stdout and "skipped" not in result.stdout
