"""A fixed-bucket latency histogram: constant memory whatever the number of deliveries.

At 100K consumers a list of samples per delivery would be the generator's largest cost; the
buckets here grow geometrically (``SUB_BUCKETS`` per power of two, ~4.4 % wide), so a
percentile read from them is within one bucket's width of the true one. Histograms merge by
adding their counts, which is how workers' figures become one.
"""

from __future__ import annotations

import math

SUB_BUCKETS = 16  # buckets per power of two of microseconds
BUCKETS = 40 * SUB_BUCKETS  # up to 2**40 µs (~12 days): nothing falls off the end


class LatencyHistogram:
    """Counts of latencies in microseconds; the exact max, min and sum are kept beside."""

    __slots__ = ("count", "counts", "max_us", "min_us", "total_us")

    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.count = 0
        self.total_us = 0
        self.max_us = 0
        self.min_us = 0

    def record(self, us: int) -> None:
        """One latency; a negative one (clocks read at a coarser grain) counts as zero."""
        if us < 1:
            us = 0
            index = 0
        else:
            index = min(BUCKETS - 1, int(math.log2(us) * SUB_BUCKETS) + 1)
        self.counts[index] += 1
        if self.count == 0 or us < self.min_us:
            self.min_us = us
        self.count += 1
        self.total_us += us
        if us > self.max_us:
            self.max_us = us

    def merge(self, other: LatencyHistogram) -> None:
        for i, n in enumerate(other.counts):
            if n:
                self.counts[i] += n
        if other.count:
            self.min_us = other.min_us if self.count == 0 else min(self.min_us, other.min_us)
            self.max_us = max(self.max_us, other.max_us)
        self.count += other.count
        self.total_us += other.total_us

    def percentile_us(self, q: float) -> float:
        """The upper edge of the bucket holding the ``q`` quantile (capped at the exact max)."""
        if self.count == 0:
            return math.nan
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                return min(float(self.max_us), upper_edge_us(index))
        return float(self.max_us)

    def summary_ms(self) -> dict[str, float | int | None]:
        """P50, P99, max and mean in milliseconds, and the count: what the report shows."""
        if self.count == 0:
            return {"count": 0, "p50": None, "p99": None, "max": None, "mean": None}
        return {
            "count": self.count,
            "p50": round(self.percentile_us(0.50) / 1000, 2),
            "p99": round(self.percentile_us(0.99) / 1000, 2),
            "max": round(self.max_us / 1000, 2),
            "mean": round(self.total_us / self.count / 1000, 2),
        }

    def to_state(self) -> dict[str, object]:
        """A compact, picklable form for the trip from a worker to the coordinator."""
        nonzero = {i: n for i, n in enumerate(self.counts) if n}
        return {
            "counts": nonzero,
            "count": self.count,
            "total": self.total_us,
            "max": self.max_us,
            "min": self.min_us,
        }

    @staticmethod
    def from_state(state: dict) -> LatencyHistogram:
        h = LatencyHistogram()
        for i, n in state["counts"].items():
            h.counts[int(i)] = n
        h.count, h.total_us, h.max_us, h.min_us = state["count"], state["total"], state["max"], state["min"]
        return h


def upper_edge_us(index: int) -> float:
    """The largest latency bucket ``index`` takes (bucket 0: zero)."""
    return 0.0 if index == 0 else 2 ** (index / SUB_BUCKETS)
