"""``magnetar smart-city`` that cannot start (its work directory, its embedded broker) says why in one
line and exits 1, never with a traceback (docs/cli.md). Nothing of Spark starts in these runs, but the
command checks for pyspark and Java first."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from tests.needs import need_spark

need_spark()


def smart_city(work_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar", "smart-city", "--work-dir", str(work_dir), "--duration-s", "5"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("magnetar smart-city: "), done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_a_work_directory_that_cannot_be_made(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory")
    assert_one_line(smart_city(a_file / "work"), "Not a directory", str(a_file))


def test_an_embedded_broker_that_cannot_start(tmp_path):
    """Another run (here: this test) holds the work directory's broker data: the broker's own reason."""
    data_dir = tmp_path / "work" / "broker" / "data"
    data_dir.mkdir(parents=True)
    fd = os.open(data_dir / "broker.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b"4242")
        done = smart_city(tmp_path / "work")
    finally:
        os.close(fd)
    assert_one_line(done, "the embedded broker did not start", "in use by another broker (pid 4242)")
