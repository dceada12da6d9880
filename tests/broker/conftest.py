"""Fixtures shared by the broker's tests without a network."""

from __future__ import annotations

import pytest

from .entry_harness import Harness


@pytest.fixture
def harnesses(tmp_path):
    """Start ``Harness`` objects on tmp_path/data (same dir each call); closed at teardown."""
    opened: list[Harness] = []

    def start(**config) -> Harness:
        h = Harness(tmp_path / "data", **config)
        opened.append(h)
        return h

    yield start
    for h in opened:
        h.close()


@pytest.fixture
def on_topic(harnesses):
    """Run ``async def scenario(h, topic)`` on a fresh harness's event loop (broker settings as
    keyword arguments)."""

    def run(scenario, **config) -> None:
        h = harnesses(**config)
        h.run(scenario(h, h.topic()))

    return run
