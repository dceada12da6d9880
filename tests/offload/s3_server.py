"""A real S3 protocol server on 127.0.0.1 for the tests: moto's server mode, run as a process
(``python -m moto.server``), spoken to by obstore's real S3 client. ``pause``/``resume`` stop and
continue the process (SIGSTOP/SIGCONT): requests then hang until the client's timeout, as with a
store that is unreachable, and the objects are all there again once it resumes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.waiting import eventually

BUCKET = "magnetar-offload"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class S3Server:
    def __init__(self, log_dir: Path) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log = open(log_dir / "moto.log", "wb")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        eventually(self._answers, timeout=30, what="the S3 server answering")

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the S3 server exited with {self.process.returncode}")
        try:
            urllib.request.urlopen(self.endpoint, timeout=1).close()
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False
        return True

    def create_bucket(self, name: str = BUCKET) -> None:
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        urllib.request.urlopen(request, timeout=5).close()

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
