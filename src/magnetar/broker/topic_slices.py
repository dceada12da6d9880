"""Passes over every loaded topic, a slice at a time.

With 100,000 topics loaded, one pass in one go (a housekeeping task, the inactive-topic sweep,
``/metrics``) would stall every client for seconds: each pass goes ``SLICE`` topics at a time,
and the loop serves everyone else between slices."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TypeVar

T = TypeVar("T")

#: Topics one step of a pass handles before the loop serves others.
SLICE = 500
#: The same for passes that read many values of each topic (``/metrics``, the broker's topic
#: stats): 500 topics' worth held the loop for about 0.1 s on a busy 2-core machine.
READ_SLICE = 100


def in_slices(topics: Mapping[str, T], size: int = SLICE) -> Iterator[list[tuple[str, T]]]:
    """The topics loaded when the pass began, ``size`` at a time, with their keys; one unloaded
    meanwhile (or unloaded and loaded again: another object) is left out."""
    snapshot = list(topics.items())
    for start in range(0, len(snapshot), size):
        yield [(key, topic) for key, topic in snapshot[start : start + size] if topics.get(key) is topic]
