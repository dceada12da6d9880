"""Fixtures for the client's tests against a broker process.

The broker process helper, its fixtures and the failure-report hook come from the interop
suite (tests/interop/conftest.py); ``magnetar_client`` adds our own blocking client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from magnetar.client import Client
from tests.interop.conftest import (  # noqa: F401 - fixtures and the report hook are used by name
    CLIENT_LOGGER,
    BrokerProcess,
    broker,
    broker_factory,
    client_factory,
    pytest_runtest_makereport,
    tls_files,
    topic,
)


@pytest.fixture
def magnetar_factory() -> Iterator[Callable[..., Client]]:
    clients: list[Client] = []

    def make(service_url: str, **options) -> Client:
        options.setdefault("operation_timeout_seconds", 10)
        client = Client(service_url, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def magnetar_client(broker, magnetar_factory) -> Client:  # noqa: F811 - the imported fixture
    return magnetar_factory(broker.service_url)
