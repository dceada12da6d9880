"""What makes a broker one of a supervisor's workers (``magnetar standalone --workers N``).

A worker shares the data directory, the advertised ports and the store of bundle owners with the
other workers of one machine; the supervisor (``cli/supervisor.py``) holds the data directory's
lock and checked its directories once, so a worker does neither. Besides the advertised ports
(bound with SO_REUSEPORT: the kernel spreads new connections over the workers) each worker listens
on ports of its own, which its LOOKUP answers name when it owns the topic: a client that looked
up a topic must reach that very worker.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """Worker ``index`` (0, 1 ...) of its supervisor."""

    index: int

    @property
    def broker_id(self) -> str:
        """Its name among the brokers owning bundles (lookups, ``ownership.sqlite``, logs)."""
        return f"worker-{self.index}"
