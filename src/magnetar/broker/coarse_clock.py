"""A wall clock read without a system call: a float that housekeeping moves on every second or so.

For times kept per consumer on a hot path (a broadcast consumer's last ack, one assignment per
ack) where a second's precision is enough: reading ``CLOCK.now`` is an attribute load, where
``time.time()`` is a call per ack for 100K consumers.
"""

from __future__ import annotations

import time


class CoarseClock:
    """Seconds since the epoch as of the last ``tick``."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = time.time()

    def tick(self) -> float:
        self.now = time.time()
        return self.now


#: The broker's one coarse clock, ticked by the broker's broadcast sweep
#: (``broadcast_lag_check_interval_seconds``, 1 s by default).
CLOCK = CoarseClock()
