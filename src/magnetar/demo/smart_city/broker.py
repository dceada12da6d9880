"""An embedded broker for the job: ``magnetar standalone`` as a child process.

A child process rather than a thread, so the broker has its own interpreter (and GIL) next
to the simulator and the Spark driver. It listens on 127.0.0.1 on ports the OS picks, keeps
its data in the job's work directory, and is stopped with SIGTERM (it flushes and exits);
if it does not exit in time it is killed. Starting and stopping is ``magnetar.broker_process``.
"""

from __future__ import annotations

import signal
from pathlib import Path

from magnetar.broker_process import BrokerProcess, BrokerProcessError

BrokerError = BrokerProcessError


class EmbeddedBroker(BrokerProcess):
    def __init__(self, work_dir: Path, settings: dict[str, object] | None = None) -> None:
        self.work_dir = work_dir
        self.settings = settings or {}
        super().__init__(work_dir, self.settings)

    @property
    def admin_url(self) -> str:
        return self.http_url

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        """SIGTERM (or ``sig``); the exit code. A broker still running after ``timeout`` seconds is
        killed."""
        try:
            return super().stop(sig, timeout=timeout)
        except BrokerProcessError:  # killed: the job's teardown goes on
            return self.proc.returncode if self.proc is not None else None
