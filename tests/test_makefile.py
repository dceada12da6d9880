"""The README's ``make`` commands install what each needs: ``make broker`` the broker alone (no
Spark: it serves, it runs no job), ``make run`` the Spark extra for the smart-city job, ``make test``
the dev tools too. Checked with ``make -n`` on a virtual environment that does not exist yet, as on
a fresh machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def installs(target: str, tmp_path: Path) -> list[str]:
    """The ``pip install -e`` lines ``make TARGET`` would run on a fresh virtual environment."""
    done = subprocess.run(
        ["make", "-n", target, f"VENV={tmp_path / '.venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    pip = f"{tmp_path / '.venv'}/bin/pip install -q -e "
    return [line.removeprefix(pip) for line in done.stdout.splitlines() if line.startswith(pip)]


def test_make_broker_installs_the_broker_alone(tmp_path):
    assert installs("broker", tmp_path) == ["."]


def test_make_run_and_make_test_install_their_extras(tmp_path):
    assert installs("run", tmp_path) == ["'.[spark]'"]
    assert installs("test", tmp_path) == ["'.[dev,spark]'"]
