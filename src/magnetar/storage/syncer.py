"""Group commit: one daemon thread fsyncs every managed ledger's pending writes.

Adds write to the OS at once and queue their callbacks. The thread takes each
dirty managed ledger's whole queue, fsyncs once, and completes the lot; writes
that arrive during an fsync wait for the next one. So under load many entries
share one fsync, and a lone entry still gets its own without delay.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

log = logging.getLogger(__name__)


class SyncTarget(Protocol):
    def sync_round(self) -> int:
        """Fsync what is pending and complete its callbacks; return how many fsyncs ran."""
        ...


class Syncer:
    """The fsync thread shared by a Storage's managed ledgers.

    ``always``: fsync as soon as something is pending. ``interval``: let writes
    gather for up to ``interval_s`` after the first one, then fsync them together.
    ``never``: no thread; managed ledgers complete adds right after the write.
    """

    def __init__(self, policy: str, interval_s: float):
        self.policy = policy
        self.interval_s = interval_s
        self.rounds = 0
        self._fsyncs = 0
        self._count_lock = threading.Lock()
        self._cond = threading.Condition()
        self._dirty: dict[int, SyncTarget] = {}
        self._first_dirty_at = 0.0
        self._stopping = False
        self._thread: threading.Thread | None = None
        if policy != "never":
            self._thread = threading.Thread(target=self._run, name="magnetar-fsync", daemon=True)
            self._thread.start()

    @property
    def fsync_count(self) -> int:
        """fdatasync calls made so far, by this thread and by rollovers and closes."""
        return self._fsyncs

    def count(self, fsyncs: int) -> None:
        if fsyncs:
            with self._count_lock:
                self._fsyncs += fsyncs

    def request(self, target: SyncTarget) -> None:
        """Ask for ``target``'s pending writes to be fsynced soon."""
        with self._cond:
            if self._thread is None or self._stopping:
                raise RuntimeError("the fsync thread is not running")
            if not self._dirty:
                self._first_dirty_at = time.monotonic()
            self._dirty[id(target)] = target
            self._cond.notify()

    def stop(self) -> None:
        """Fsync whatever is still pending, then end the thread. Idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            targets = self._next_round()
            if targets is None:
                return
            self.rounds += 1
            for target in targets:
                try:
                    self.count(target.sync_round())
                except Exception:  # a bug in one managed ledger must not stop everyone's fsyncs
                    log.exception("group commit failed for %r", target)

    def _next_round(self) -> list[SyncTarget] | None:
        with self._cond:
            while not self._dirty and not self._stopping:
                self._cond.wait()
            if not self._dirty:
                return None
            if self.policy == "interval":
                deadline = self._first_dirty_at + self.interval_s
                while not self._stopping and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
            targets = list(self._dirty.values())
            self._dirty.clear()
            return targets
