"""How many ledgers keep their files open: the least recently used close them, and reopen on use.

Every ledger is files: a managed ledger's open ledger is a log and an index, each closed ledger
being read a log, a cursor ledger a log and an index. Kept open, they cost descriptors for good:
10K subscriptions took 20K (a broker whose limit is 20,000 refused subscriptions near 6,500),
and 10K idle topics another 20K (issue 40: new topics refused from 9,970 on). Pulsar's brokers
hold none (the bookies do, within BookKeeper's ``openFileLimit``).

Here the ledgers with open files hold at most ``limit`` of them, process-wide (descriptors are
the process's). Past it, the least recently used holder whose entries are all synced closes its
files (``park``) and opens them again when next written or read, without reading anything
(``Segment.reopen``): the offsets stay in memory. A holder busy on another thread, or with an
fsync pending, stays open until a later turn, so the limit may be passed for a moment; nothing
is ever closed before the fsync the durability rules ask for (docs/storage.md).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

#: Files (descriptors) that ledgers may keep open, process-wide.
DEFAULT_LIMIT = 2048


class Parkable(Protocol):
    def park(self) -> bool:
        """Close the files if idle and synced, saying so with ``closed`` (under the holder's own
        lock, so that a reopen on another thread is told after it); False when that cannot be
        done now."""
        ...


def try_hold(lock: threading.RLock) -> bool:
    """Take ``lock`` without waiting, unless this thread holds it already: a re-entrant lock would
    let a park in midway through this thread's own use of the files."""
    if lock._is_owned():  # type: ignore[attr-defined]  # RLock's own test, as threading.Condition uses
        return False
    return lock.acquire(blocking=False)


class OpenLedgerFiles:
    """The holders of open ledger files, least recently used first, with how many files each has."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._open: OrderedDict[int, tuple[Parkable, int]] = OrderedDict()
        self._files = 0
        self.parks = 0  # holders that closed their files for the limit (stats, tests)

    def __len__(self) -> int:
        return len(self._open)

    @property
    def files(self) -> int:
        """Files open now, as the holders said."""
        return self._files

    def opened(self, holder: Parkable, files: int) -> None:
        """``holder`` has ``files`` open now (made, recovered, reopened, one more read): the most
        recently used; the least recently used others close theirs if that passes the limit."""
        key = id(holder)
        with self._lock:
            previous = self._open.get(key)
            self._files += files - (previous[1] if previous is not None else 0)
            self._open[key] = (holder, files)
            self._open.move_to_end(key)
            over = self._files - self.limit
            victims: list[Parkable] = []
            for victim, count in self._open.values():
                if over <= 0:
                    break
                if victim is not holder:
                    victims.append(victim)
                    over -= count
        for victim in victims:
            parked = victim.park()  # outside the lock: it takes the victim's own (without waiting)
            with self._lock:
                if parked:
                    self.parks += 1
                elif id(victim) in self._open:
                    self._open.move_to_end(id(victim))  # busy or not synced: another time

    def used(self, holder: Parkable) -> None:
        """``holder`` was used: the most recently used now."""
        with self._lock:
            if id(holder) in self._open:
                self._open.move_to_end(id(holder))

    def closed(self, holder: Parkable) -> None:
        """``holder`` has no open files any more (parked, closed or deleted)."""
        with self._lock:
            entry = self._open.pop(id(holder), None)
            if entry is not None:
                self._files -= entry[1]


#: The process's ledgers with open files (descriptors are a per-process limit).
OPEN_LEDGER_FILES = OpenLedgerFiles()


def set_open_limit(limit: int) -> int:
    """Let ledgers keep at most ``limit`` files open; returns the previous limit."""
    previous, OPEN_LEDGER_FILES.limit = OPEN_LEDGER_FILES.limit, max(2, limit)
    return previous
