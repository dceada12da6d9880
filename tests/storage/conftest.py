"""Fixtures for storage tests: real files under tmp_path, real fsyncs, no mocks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from magnetar.storage import ManagedLedger, Position, Storage, StorageConfig

TOPIC = "persistent://public/default/orders"


class Durable:
    """Collects on_durable callbacks and lets a test wait for a number of them."""

    def __init__(self) -> None:
        self.results: list[tuple[Position | None, Exception | None]] = []
        self._cond = threading.Condition()

    def __call__(self, position: Position | None, error: Exception | None) -> None:
        with self._cond:
            self.results.append((position, error))
            self._cond.notify_all()

    def wait(self, count: int, timeout: float = 5.0) -> list[Position | None]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.results) >= count, timeout), (
                f"{len(self.results)} of {count} callbacks after {timeout}s"
            )
        return [position for position, _ in self.results]


@pytest.fixture
def open_storage(tmp_path: Path) -> Iterator[Callable[..., Storage]]:
    """Open a Storage on tmp_path/data (same dir each call) with config overrides; closed at teardown."""
    opened: list[Storage] = []

    def factory(notify=None, defer=None, check_directories=True, **overrides) -> Storage:
        config = StorageConfig(tmp_path / "data", **overrides)
        storage = Storage(config, notify=notify, defer=defer, check_directories=check_directories)
        opened.append(storage)
        return storage

    yield factory
    for storage in reversed(opened):
        storage.close()


@pytest.fixture
def storage(open_storage) -> Storage:
    return open_storage()


@pytest.fixture
def ml(storage: Storage) -> ManagedLedger:
    return storage.open_managed_ledger(TOPIC)


def add_durable(ml: ManagedLedger, payloads: list[bytes]) -> list[Position]:
    """Add entries and wait until every one is durable."""
    durable = Durable()
    positions = [ml.add_entry(p, durable) for p in payloads]
    durable.wait(len(positions))
    assert all(error is None for _, error in durable.results)
    return positions


def payloads(n: int, size: int = 10, tag: str = "m") -> list[bytes]:
    return [f"{tag}{i}".encode().ljust(size, b".") for i in range(n)]
