"""The live progress line of ``produce`` / ``consume``: when it is drawn (a terminal's standard
error, no ``--quiet``), what it says, and that standard output never carries it."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

import pytest

from magnetar.cli.progress import live_progress, progress_wanted, rate_text


# -- the pure part ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tty", "quiet", "wanted"),
    [(True, False, True), (True, True, False), (False, False, False), (False, True, False)],
)
def test_progress_is_drawn_only_on_a_terminal_without_quiet(tty, quiet, wanted):
    assert progress_wanted(tty, quiet) is wanted


def test_rate_text_has_count_rate_and_elapsed_time():
    assert rate_text("produced", 1204, 3.0) == "produced 1,204 messages  (401.3 msg/s, 3.0 s)"
    assert rate_text("read", 0, 0.0) == "read 0 messages  (0.0 msg/s, 0.0 s)"


def test_off_progress_still_counts_and_writes_nothing():
    stream = io.StringIO()  # not a terminal
    with live_progress("consumed", stderr=stream) as progress:
        progress.advance(3)
        progress.advance()
    assert progress.count == 4
    assert stream.getvalue() == ""


# -- the commands under a pseudo-terminal -------------------------------------------------------------------
def run_with_tty_stderr(*args: str) -> tuple[int, str, str]:
    """Run ``magnetar ARGS`` with standard error on a pseudo-terminal and standard output piped:
    (exit code, stdout, what the terminal received)."""
    master, slave = os.openpty()
    chunks: list[bytes] = []

    def drain() -> None:  # read as it comes, so the terminal's buffer never fills
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child side closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    env = {**os.environ, "COLUMNS": "120", "TERM": "xterm"}
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "magnetar", *args], stdout=subprocess.PIPE, stderr=slave, env=env
        )
        os.close(slave)
        stdout, _ = child.communicate(timeout=60)
        reader.join(timeout=10)
    finally:
        os.close(master)
    return child.returncode, stdout.decode(), b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
@pytest.mark.interop
def test_progress_on_a_terminal_stderr_never_on_stdout_and_quiet_silences_it(broker, topic):
    url = broker.service_url
    code, out, tty = run_with_tty_stderr("produce", topic, "-m", "x", "-n", "40", "-r", "80", "--url", url)
    assert code == 0, tty
    assert "produced" in tty and "msg/s" in tty  # the live line, drawn on the terminal
    assert out.startswith(f"40 messages successfully produced to {topic}")  # the summary, as before
    assert "\x1b" not in out

    code, out, tty = run_with_tty_stderr(
        "consume", topic, "-s", "sub", "--from", "earliest", "-n", "40", "--url", url
    )
    assert code == 0, tty
    assert out.splitlines() == ["x"] * 40  # data lines unchanged, nothing else
    assert "consumed" in tty and "msg/s" in tty
    assert f"40 messages consumed from {topic}" in tty

    code, out, tty = run_with_tty_stderr("produce", topic, "-q", "-m", "y", "-n", "5", "--url", url)
    assert (code, out, tty) == (0, "", "")
    code, out, tty = run_with_tty_stderr("consume", topic, "-s", "sub", "-n", "5", "--quiet", "--url", url)
    assert (code, out, tty) == (0, "y\n" * 5, "")

    piped = subprocess.run(
        [sys.executable, "-m", "magnetar", "read", topic, "-m", "earliest", "-n", "45", "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == f"45 messages read from {topic}\n"  # piped: no progress line at all
