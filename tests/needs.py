"""What a group of tests needs from the machine, checked in one place.

Without it the tests skip, saying what is missing; under ``CI=true`` the root conftest turns
that skip into a failure, so CI cannot go green by not running them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def java_available() -> bool:
    """Whether a ``java`` Spark can start is on ``JAVA_HOME`` or ``PATH``."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and Path(java_home, "bin", "java").exists():
        return True
    return shutil.which("java") is not None


def need_spark() -> None:
    """Skip the calling test module unless pyspark is installed and Java can run it."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    if not java_available():
        pytest.skip("Spark needs Java (17)", allow_module_level=True)


def chromium_path() -> str:
    """Debian's ``chromium`` (.ci/system-packages installs it), for the console's browser tests;
    the test module is skipped without it (a failure under ``CI=true``)."""
    pytest.importorskip("playwright", reason="the dev extra's playwright is not installed")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("the console's browser tests need Debian's chromium", allow_module_level=True)
    return path
