"""``minOffsetsPerTrigger`` with ``maxTriggerDelay``: whether a trigger may start a micro-batch.

Pure logic with an injectable clock (no Spark, no broker). Semantics as Spark's Kafka source:
a trigger waits (plans no batch) while fewer than ``min_offsets`` new offsets exist over all
partitions, unless ``max_delay_ms`` has passed since the last trigger that was let through;
the first trigger after the reader is created is never held back (there is no last one).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping

from magnetar.spark.errors import InvalidOptionError

DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000  # 15m, as Spark's Kafka source

_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_MS_PER_UNIT = {"us": 0.001, "ms": 1, "s": 1_000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(raw: str, name: str) -> int:
    """A Spark time string (``500ms``, ``30s``, ``15m``, ``1h``; a bare number is ms) in ms."""
    match = _DURATION.match(raw)
    if match is None:
        raise InvalidOptionError(
            f"option {name} must be a duration such as 500ms, 30s, 15m or 1h (a bare number is ms), "
            f"not {raw!r}"
        )
    number, unit = int(match.group(1)), (match.group(2) or "ms").lower()
    return int(number * _MS_PER_UNIT[unit])


def new_offsets(start: Mapping[str, int], end: Mapping[str, int]) -> int:
    """How many offsets ``[start, end)`` spans over all partitions; a partition whose start or
    end is not known yet (negative) counts for nothing."""
    return sum(max(0, end[t] - start[t]) for t in end if t in start and start[t] >= 0 and end[t] >= 0)


class TriggerGate:
    """Lets a trigger through when ``min_offsets`` are pending or ``max_delay_ms`` has passed
    since the last trigger let through; it lives as long as the driver's stream reader."""

    def __init__(
        self, min_offsets: int, max_delay_ms: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.min_offsets = min_offsets
        self.max_delay_ms = max_delay_ms
        self._clock = clock
        self._last_ms: float | None = None

    def admit(self, pending: int) -> bool:
        """Whether a trigger with ``pending`` new offsets may plan a batch now; a trigger let
        through restarts the delay."""
        now_ms = self._clock() * 1000
        due = self._last_ms is None or now_ms - self._last_ms >= self.max_delay_ms
        if due or pending >= self.min_offsets:
            self._last_ms = now_ms
            return True
        return False
