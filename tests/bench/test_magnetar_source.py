"""A benchmark's copy of Magnetar at a git ref (``MagnetarSource.snapshot``) is compiled when made:
where ``PYTHONDONTWRITEBYTECODE`` is set no broker start keeps its bytecode, and each start-up
measured would compile every module again."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.brokers import MagnetarSource

pytestmark = pytest.mark.slow  # slow: git archive and compiling every module


def test_a_snapshot_is_importable_with_its_bytecode_already_there(tmp_path):
    source = MagnetarSource.snapshot("HEAD", tmp_path / "copy")
    assert source.src_dir is not None
    package = source.src_dir / "magnetar"
    assert list((package / "__pycache__").glob("__init__.*.pyc"))
    assert list((package / "broker" / "__pycache__").glob("service.*.pyc"))
    found = subprocess.run(
        [sys.executable, "-B", "-c", "import magnetar, sys; sys.stdout.write(magnetar.__file__)"],
        env=source.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert found == str(package / "__init__.py")
