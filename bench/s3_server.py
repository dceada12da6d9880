"""A real S3 protocol server on 127.0.0.1: moto's server mode, run as a process
(``python -m moto.server``), spoken to by obstore's real S3 client. For the offload benchmark and
the tiered-storage tests (``tests/offload/s3_server.py``). ``pause``/``resume`` stop and continue
the process (SIGSTOP/SIGCONT): requests then hang until the client's timeout, as with a store
that is unreachable, and the objects are all there again once it resumes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

BUCKET = "magnetar-offload"
#: How long the server may take to answer its first request (it imports a lot).
START_TIMEOUT_S = 30.0


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
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the S3 server did not answer within {START_TIMEOUT_S:g} s")
            time.sleep(0.05)

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

    def exists(self, key: str, bucket: str = BUCKET) -> bool:
        """Whether the object ``key`` is there (moto answers unsigned requests)."""
        url = f"{self.endpoint}/{bucket}/{urllib.parse.quote(key)}"
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=5).close()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise
        return True

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
