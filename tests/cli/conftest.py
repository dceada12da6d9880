"""Fixtures for the command-line tests: a real broker process (tests/interop/conftest.py) and a
way to run ``python -m magnetar ...`` as a subprocess."""

from __future__ import annotations

import subprocess
import sys

from tests.interop.conftest import (  # noqa: F401 - fixtures and the report hook are used by name
    broker,
    broker_factory,
    client,
    client_factory,
    pytest_runtest_makereport,
    tls_files,
    topic,
)


def magnetar(*args: str, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``magnetar ARGS`` in a child process, as a user would; its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "magnetar", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
    )


def admin(target, *args: str) -> subprocess.CompletedProcess[str]:
    """``magnetar admin --admin-url <target's admin URL> ARGS`` in a child process."""
    return magnetar("admin", "--admin-url", target.http_url, *args)


def admin_ok(target, *args: str) -> str:
    """stdout of an admin command that must succeed (exit 0, no traceback)."""
    done = admin(target, *args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout
