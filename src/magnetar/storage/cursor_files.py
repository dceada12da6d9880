"""How many cursor ledgers keep their files open: idle ones close them, and reopen to flush.

A cursor ledger (``cursor_ledger.py``) is two files, a log and an index. Kept open, every
durable cursor would hold two file descriptors for good: 10K subscriptions, one per consumer as
the seed's Figure 8 has it, would take 20K descriptors, and a broker whose limit is 20,000
refused subscriptions near 6,500 (measured: docs/benchmarks.md). Pulsar's cursors hold no file.

Here at most ``limit`` cursor ledgers, process-wide (descriptors are the process's), have their
files open; past it, the least recently used one whose entries are all synced closes them
(``CursorLedger.park``), and opens them again when next written or read, without reading
anything (``Segment.reopen``): its offsets stay in memory. One that is busy on another thread,
or has entries not yet synced, stays open until a later turn. A flush of an idle cursor then
costs two ``open`` and two ``close`` calls more.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

#: Cursor ledgers with open files (two descriptors each), process-wide.
DEFAULT_LIMIT = 1024


class Parkable(Protocol):
    def park(self) -> bool:
        """Close the files if idle and synced; False when that cannot be done now."""
        ...


class OpenCursorLedgers:
    """The cursor ledgers whose files are open, least recently used first."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._open: OrderedDict[int, Parkable] = OrderedDict()
        self.parks = 0  # files closed for the limit (stats, tests)

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, ledger: Parkable) -> None:
        """``ledger`` has its files open now (made, recovered or reopened); others may close theirs."""
        with self._lock:
            self._open[id(ledger)] = ledger
            self._open.move_to_end(id(ledger))
            over = len(self._open) - self.limit
            victims: list[Parkable] = []
            for key, victim in self._open.items():
                if len(victims) >= over:
                    break
                if key != id(ledger):
                    victims.append(victim)
        for victim in victims:
            parked = victim.park()  # outside the lock: it takes the victim's own (without waiting)
            with self._lock:
                if parked:
                    self._open.pop(id(victim), None)
                    self.parks += 1
                elif id(victim) in self._open:
                    self._open.move_to_end(id(victim))  # busy or not synced: another time

    def used(self, ledger: Parkable) -> None:
        """``ledger`` was used: the most recently used now."""
        with self._lock:
            if id(ledger) in self._open:
                self._open.move_to_end(id(ledger))

    def closed(self, ledger: Parkable) -> None:
        """``ledger`` has no open files any more (parked, closed or deleted)."""
        with self._lock:
            self._open.pop(id(ledger), None)


#: The process's cursor ledgers (descriptors are a per-process limit).
OPEN_CURSOR_LEDGERS = OpenCursorLedgers()


def set_open_limit(limit: int) -> int:
    """Let at most ``limit`` cursor ledgers keep their files open; returns the previous limit."""
    previous, OPEN_CURSOR_LEDGERS.limit = OPEN_CURSOR_LEDGERS.limit, max(1, limit)
    return previous
