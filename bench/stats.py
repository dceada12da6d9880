"""Medians, spreads and percentiles: small pure functions over lists of numbers."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Spread:
    """The median of some repeats and their range."""

    median: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def spread(values: Sequence[float]) -> Spread | None:
    """Median and min-max of ``values``; None when there are none."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return None
    return Spread(statistics.median(values), min(values), max(values), len(values))


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (``fraction`` 0.99 for p99)."""
    if not sorted_values:
        return math.nan
    rank = math.ceil(fraction * len(sorted_values))
    return sorted_values[min(max(rank, 1), len(sorted_values)) - 1]


def latency_summary(latencies_us: Sequence[float]) -> dict[str, float]:
    """p50, p99, p999 and max of per-send latencies, in microseconds, and how many there were."""
    ordered = sorted(latencies_us)
    return {
        "n": len(ordered),
        "p50": percentile(ordered, 0.50),
        "p99": percentile(ordered, 0.99),
        "p999": percentile(ordered, 0.999),
        "max": ordered[-1] if ordered else math.nan,
    }


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """``ours / theirs``, or None when either is missing or the peer's is zero."""
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs
