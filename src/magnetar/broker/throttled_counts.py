"""Refusals counted by kind, and said in the log at most once an interval.

A client that retries a refused request in a loop must not flood the log: the broker counts
every refusal (for /metrics) and writes one line per interval, with the number of refusals
since the last line. Descriptor shortages (``descriptors.py``, one line for all kinds) and
limits (``limits.py``, one line per limit) both count this way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable


class ThrottledCounts:
    """Counts by key; ``count`` says when a log line about a key's group is due."""

    def __init__(
        self, keys: Iterable[str], interval_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.counts: dict[str, int] = dict.fromkeys(keys, 0)
        self._interval_s = interval_s
        self._clock = clock
        self._logged_at: dict[str, float] = {}
        self._since_log: dict[str, int] = {}
        self._lock = threading.Lock()  # topics are opened (and refused) on worker threads too

    def count(self, key: str, group: str | None = None) -> int | None:
        """Count one refusal of ``key``. When a line about ``group`` (``key`` by default) is due,
        returns the refusals in that group since the last one (this one included), else None."""
        group = key if group is None else group
        with self._lock:
            self.counts[key] += 1
            since = self._since_log.get(group, 0) + 1
            now = self._clock()
            last = self._logged_at.get(group)
            if last is not None and now - last < self._interval_s:
                self._since_log[group] = since
                return None
            self._logged_at[group] = now
            self._since_log[group] = 0
            return since
