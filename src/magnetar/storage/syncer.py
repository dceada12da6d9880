"""Group commit: pending writes of every managed ledger are fsynced in rounds.

Adds write to the OS at once and queue their callbacks. A round takes each
dirty managed ledger's whole queue, fsyncs once, and completes the lot; writes
that arrive during an fsync wait for the next one. So under load many entries
share one fsync, and a lone entry still gets its own without delay.

Rounds run on a daemon thread, or, for the ``always`` policy when the owner
gives a ``defer`` hook (a broker: "at the end of this event-loop pass"), on the
owner's thread itself once it has handled everything that arrived in the pass.
Handing a round to a thread and its completions back costs two thread wake-ups
and GIL hand-overs per round, about as much CPU as the fsync; on the loop the
round costs neither. But the loop waits for the disk meanwhile, so rounds go to
the thread while fsyncs are slow (a moving average above ``inline_max_s``):
dispatch to consumers of data already stored goes on during a slow fsync.
Completions may then reach the owner out of round order across the switch;
their receivers (receipts per producer, the highest stored position) do not
depend on that order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

#: Weight of the newest round in the moving average of round durations.
_SMOOTHING = 0.2


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

    def __init__(
        self,
        policy: str,
        interval_s: float,
        defer: Callable[[Callable[[], None]], None] | None = None,
        inline_max_s: float = 0.0,
    ):
        self.policy = policy
        self.interval_s = interval_s
        self.rounds = 0
        #: Rounds run on the owner's thread (counted in ``rounds`` too).
        self.inline_rounds = 0
        self._defer = defer if policy == "always" and inline_max_s > 0 else None
        self._inline_max_s = inline_max_s
        self._owner = threading.get_ident()
        self._inline: dict[int, SyncTarget] = {}
        self._inline_scheduled = False
        #: Moving average of a round's fsync time, seconds (both paths update it).
        self._round_s = 0.0
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
        if (
            self._defer is not None
            and self._round_s <= self._inline_max_s
            and threading.get_ident() == self._owner
        ):
            if self._stopping:
                raise RuntimeError("the fsync thread is not running")
            self._inline[id(target)] = target
            if not self._inline_scheduled:
                self._inline_scheduled = True
                self._defer(self._run_inline)
            return
        with self._cond:
            if self._thread is None or self._stopping:
                raise RuntimeError("the fsync thread is not running")
            if not self._dirty:
                self._first_dirty_at = time.monotonic()
                # The thread waits only while nothing is dirty: woken once, when the first comes
                # (waking it for every add cost a thread hand-over each).
                self._cond.notify()
            self._dirty[id(target)] = target

    def stop(self) -> None:
        """Fsync whatever is still pending, then end the thread. Idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _run_inline(self) -> None:
        self._inline_scheduled = False
        targets = list(self._inline.values())
        self._inline.clear()
        self.inline_rounds += 1
        self._round(targets)

    def _run(self) -> None:
        while True:
            targets = self._next_round()
            if targets is None:
                return
            self._round(targets)
            # Not kept while the thread waits for the next round: a managed ledger closed meanwhile
            # (an unloaded topic's) is freed at once.
            del targets

    def _round(self, targets: list[SyncTarget]) -> None:
        self.rounds += 1
        started = time.monotonic()
        for target in targets:
            try:
                self.count(target.sync_round())
            except Exception:  # a bug in one managed ledger must not stop everyone's fsyncs
                log.exception("group commit failed for %r", target)
        self._round_s += (time.monotonic() - started - self._round_s) * _SMOOTHING

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
