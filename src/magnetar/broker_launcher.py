"""Start broker processes from a process that has already imported the broker: a fork each.

A broker started as ``python -m magnetar standalone`` spends most of its start-up importing
(protobuf, aiohttp, pydantic, click, uvloop: some 0.5 s of CPU on a small VM) before it opens a
port. A test suite starts hundreds of brokers, so ``BrokerProcess`` may ask a *launcher* instead:
one long-lived child (``python -m magnetar.cli.launcher``) that imports the broker once, then
forks a child per request. Each fork is a real broker process (its own PID, signals, files and
exit status; only the command line ``ps`` shows is the launcher's), started from the same code
and arguments, with the requested environment, working directory and log.

The launcher is single-threaded and starts no event loop, so forking it is safe. It reaps its
children and writes each exit status (as ``subprocess.Popen.returncode`` has it: negative for a
signal) to a file of its own, which ``LaunchedProcess`` reads: the parent of a forked broker is the
launcher, so only it can wait for one. The launcher ends when its standard input closes (the
process that started it has gone).

This module is the asking side, on the standard library only (``broker_process`` uses it and
stays free of the broker's imports); the launcher itself is ``magnetar.cli.launcher``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

#: How often a waiting ``LaunchedProcess`` looks for its exit status.
POLL_S = 0.01


class LauncherError(RuntimeError):
    """The launcher could not start a broker (it died, or the fork failed)."""


class LaunchedProcess:
    """A broker forked by the launcher, with the parts of ``subprocess.Popen`` that
    ``BrokerProcess`` and tests use: ``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``."""

    def __init__(self, pid: int, status_file: Path, args: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self._status_file = status_file

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = int(self._status_file.read_text())
            except (FileNotFoundError, ValueError):  # running (or the file half-written: not yet renamed)
                return None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(POLL_S)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped yet: the PID is still this broker's (maybe a zombie)
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Launcher:
    """The client side: starts the launcher process and asks it for brokers."""

    def __init__(self, python: str = sys.executable) -> None:
        self.status_dir = Path(tempfile.mkdtemp(prefix="magnetar-launcher-"))
        self._proc = subprocess.Popen(
            [python, "-m", "magnetar.cli.launcher", str(self.status_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._count = 0
        ready = self._proc.stdout.readline() if self._proc.stdout is not None else b""
        if json.loads(ready or b"{}").get("ready") is not True:
            self.close()
            raise LauncherError(f"the broker launcher did not start (exit status {self._proc.poll()})")

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def launch(self, argv: Sequence[str], env: Mapping[str, str], log: Path) -> LaunchedProcess:
        """A broker running ``magnetar`` with ``argv`` (after ``python -m magnetar``), its stdout
        and stderr written to ``log``."""
        self._count += 1
        request = {"id": self._count, "argv": list(argv), "env": dict(env), "cwd": os.getcwd()}
        request["log"] = str(log)
        try:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            self._proc.stdin.flush()
            answer = json.loads(self._proc.stdout.readline() or b"{}")
        except (OSError, ValueError) as exc:
            raise LauncherError(f"the broker launcher stopped answering: {exc}") from exc
        if "pid" not in answer:
            said = answer.get("error", answer)
            raise LauncherError(f"the broker launcher could not start a broker: {said}")
        return LaunchedProcess(answer["pid"], self.status_dir / str(self._count), ["magnetar", *argv])

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
