"""An embedded broker for the job: ``magnetar standalone`` as a child process.

A child process rather than a thread, so the broker has its own interpreter (and GIL) next
to the simulator and the Spark driver. It listens on 127.0.0.1 on ports the OS picks, keeps
its data in the job's work directory, and is stopped with SIGTERM (it flushes and exits);
if it does not exit in time it is killed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

LISTENING = re.compile(r"listening on (pulsar://[\d.]+:\d+) and (http://[\d.]+:\d+)")


class BrokerError(RuntimeError):
    pass


class EmbeddedBroker:
    def __init__(self, work_dir: Path, settings: dict[str, object] | None = None) -> None:
        self.work_dir = work_dir
        self.settings = settings or {}
        self.service_url = ""
        self.admin_url = ""
        self.log_path = work_dir / "broker.log"
        self._proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "broker.toml"
        config.write_text("".join(f"{key} = {_toml(value)}\n" for key, value in self.settings.items()))
        cmd = [
            sys.executable,
            "-m",
            "magnetar",
            "standalone",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--http-port",
            "0",
            "--data-dir",
            str(self.work_dir / "data"),
            "--config",
            str(config),
        ]
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = LISTENING.search(self.log_path.read_text(errors="replace"))
            if match:
                self.service_url, self.admin_url = match.group(1), match.group(2)
                return self
            if self._proc.poll() is not None:
                raise BrokerError(f"the broker exited with {self._proc.returncode}:\n{self.log_tail()}")
            time.sleep(0.05)
        self.stop()
        raise BrokerError(f"the broker did not start within {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 30.0) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(10)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
