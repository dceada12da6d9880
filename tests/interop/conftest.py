"""A real broker process and the official pulsar-client, for the interop tests.

``BrokerProcess`` runs ``python -m magnetar standalone`` on a data directory, waits for its
``listening on`` line, and can stop it (SIGTERM), kill it (SIGKILL) and start it again on the
same data. Whatever a test does, the process is killed by PID at teardown, and a failing
test's report carries the broker's stderr.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

LISTENING = re.compile(r"listening on pulsar://(127\.0\.0\.1):(\d+).*?http://127\.0\.0\.1:(\d+)")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
LOG_TAIL_CHARS = 20_000

_BROKERS = pytest.StashKey[list["BrokerProcess"]]()

# The C++ client logs through this logger; WARNING keeps its chatter out of the output.
CLIENT_LOGGER = logging.getLogger("pulsar-client")
CLIENT_LOGGER.setLevel(logging.WARNING)


class BrokerProcess:
    """One broker subprocess on one data directory, restartable."""

    def __init__(self, workdir: Path, config: dict[str, object] | None = None) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path: Path | None = None
        if config:
            self.config_path = workdir / "broker.toml"
            self.config_path.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in config.items()))
        self.proc: subprocess.Popen | None = None
        self.logs: list[Path] = []
        self.port = 0
        self.http_port = 0

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self, port: int = 0, timeout: float = START_TIMEOUT_S) -> BrokerProcess:
        assert not self.running, "broker already running"
        log = self.workdir / f"broker-{len(self.logs)}.stderr"
        self.logs.append(log)
        cmd = [
            sys.executable,
            "-m",
            "magnetar",
            "standalone",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--http-port",
            "0",
            "--data-dir",
            str(self.data_dir),
        ]
        if self.config_path is not None:
            cmd += ["--config", str(self.config_path)]
        with open(log, "wb") as stderr:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self._wait_listening(log, timeout)
        return self

    def _wait_listening(self, log: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = LISTENING.search(log.read_text(errors="replace"))
            if match:
                self.port, self.http_port = int(match.group(2)), int(match.group(3))
                return
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"broker exited with {self.proc.returncode} before listening:\n{self.log_tail()}"
                )
            time.sleep(0.05)
        self.kill9()
        raise AssertionError(f"broker did not report 'listening on' within {timeout}s:\n{self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        """Signal the broker and wait for it to exit; its exit code. Fails if it does not exit in time."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"broker ignored signal {sig} for {timeout}s:\n{self.log_tail()}") from None

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def restart(self, same_port: bool = True, timeout: float = START_TIMEOUT_S) -> BrokerProcess:
        """Start again on the same data directory (the process must have stopped)."""
        assert not self.running, "stop or kill the broker before restarting it"
        return self.start(port=self.port if same_port else 0, timeout=timeout)

    def close(self) -> None:
        """Teardown: make sure no broker process outlives the test."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    # -- facts ----------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def log_text(self) -> str:
        return "".join(
            f"--- {log.name} ---\n{log.read_text(errors='replace')}" for log in self.logs if log.exists()
        )

    def log_tail(self) -> str:
        return self.log_text()[-LOG_TAIL_CHARS:]


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for index, broker in enumerate(item.stash.get(_BROKERS, [])):
            report.sections.append((f"broker {index} stderr (tail)", broker.log_tail()))


# -- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture
def broker_factory(request, tmp_path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers with a given flat TOML config: ``broker_factory({"max_message_size": 1024})``."""
    brokers: list[BrokerProcess] = []
    request.node.stash[_BROKERS] = brokers

    def start(config: dict[str, object] | None = None) -> BrokerProcess:
        broker = BrokerProcess(tmp_path / f"broker{len(brokers)}", config)
        brokers.append(broker)
        return broker.start()

    yield start
    for broker in brokers:
        broker.close()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture
def client_factory() -> Iterator[Callable[[str], pulsar.Client]]:
    clients: list[pulsar.Client] = []

    def make(service_url: str) -> pulsar.Client:
        client = pulsar.Client(service_url, operation_timeout_seconds=10, logger=CLIENT_LOGGER)
        clients.append(client)
        return client

    yield make
    for client in clients:
        with contextlib.suppress(pulsar.PulsarException):  # closed by the test already, or the broker is gone
            client.close()


@pytest.fixture
def client(broker, client_factory) -> pulsar.Client:
    return client_factory(broker.service_url)


@pytest.fixture
def topic(request) -> str:
    """A topic name no other test uses."""
    name = re.sub(r"[^A-Za-z0-9-]", "-", request.node.name)[:60]
    return f"persistent://public/default/{name}-{uuid.uuid4().hex[:8]}"
