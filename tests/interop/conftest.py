"""A real broker process and the official pulsar-client, for the interop tests.

``BrokerProcess`` (``magnetar.broker_process``) runs ``python -m magnetar standalone`` on a data
directory, waits for its ``listening on`` line, and can stop it (SIGTERM), kill it (SIGKILL) and
start it again on the same data. Whatever a test does, the process is killed by PID at teardown,
and a failing test's report carries the broker's log.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar import broker_process

from .tls_certs import TlsFiles, make_tls_files

LOG_TAIL_CHARS = 20_000

_BROKERS = pytest.StashKey[list["BrokerProcess"]]()

# The C++ client logs through this logger; WARNING keeps its chatter out of the output.
CLIENT_LOGGER = logging.getLogger("pulsar-client")
CLIENT_LOGGER.setLevel(logging.WARNING)


class BrokerProcess(broker_process.BrokerProcess):
    """One broker subprocess on one data directory, restartable (``magnetar.broker_process``), with
    every start's log in a failing test's report."""

    def __init__(self, workdir: Path, config: dict[str, object] | None = None) -> None:
        super().__init__(workdir, config or None)

    def kill9(self) -> None:
        self.kill()

    def log_text(self) -> str:
        return "".join(
            f"--- {log.name} ---\n{log.read_text(errors='replace')}" for log in self.logs if log.exists()
        )

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        return self.log_text()[-chars:]


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
def clusters(request, tmp_path):
    """Brokers as geo-replication clusters (replication_support.Clusters), killed at teardown."""
    from .replication_support import Clusters

    brokers: list[BrokerProcess] = []
    request.node.stash[_BROKERS] = brokers
    yield Clusters(tmp_path, brokers)
    for broker in brokers:
        broker.close()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture
def client_factory() -> Iterator[Callable[[str], pulsar.Client]]:
    clients: list[pulsar.Client] = []

    def make(service_url: str, operation_timeout_seconds: int = 10) -> pulsar.Client:
        client = pulsar.Client(
            service_url, operation_timeout_seconds=operation_timeout_seconds, logger=CLIENT_LOGGER
        )
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
def s3(tmp_path):
    """An S3 protocol server (moto) with the bucket made, for a broker that offloads to it."""
    from tests.offload.s3_server import S3Server  # moto: imported by the tests that ask only

    server = S3Server(tmp_path)
    server.create_bucket()
    yield server
    server.stop()


@pytest.fixture
def topic(request) -> str:
    """A topic name no other test uses. The suffix starts with a letter: a test named "...partition"
    followed by a suffix of digits alone would name a partition ("-partition-N")."""
    name = re.sub(r"[^A-Za-z0-9-]", "-", request.node.name)[:60]
    return f"persistent://public/default/{name}-t{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory) -> TlsFiles:
    """A CA and certificates made for this run (tls_certs.py); no key is ever committed."""
    return make_tls_files(tmp_path_factory.mktemp("tls"))
