"""Where a compaction may be stopped, and, for tests only, held at a named step.

A compaction checks in at each batch it reads and at its named steps (``STEPS``). When the broker
stops, a compaction under way is stopped at its next check (``CompactionStopped``): what it wrote
is deleted, the previous view stays. The test-only setting ``test_compaction_pause_at`` names a
step at which every compaction waits, after logging ``compaction of <topic> paused at <step>``,
until the broker stops: the crash tests kill the broker there, waiting on that line rather than on
time (tests/interop/test_compaction_crashes.py). Never set it in production.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Literal

log = logging.getLogger(__name__)

Step = Literal["phase_one", "phase_two", "before_switch", "after_switch", "before_delete"]
#: In the order a compaction reaches them: phase one has read an entry; phase two has written an
#: entry of the new compacted ledger; the new ledger is written and fsynced, not yet recorded; it is
#: recorded (the switch), the ``__compaction`` cursor not yet moved; the cursor is moved and
#: persisted, the previous compacted ledger not yet deleted.
STEPS: tuple[Step, ...] = ("phase_one", "phase_two", "before_switch", "after_switch", "before_delete")


class CompactionStopped(Exception):
    """The broker is stopping: the compaction under way gives up, leaving the previous view."""


class CompactionCheckpoints:
    """One topic's: the stop signal, and the step its compactions pause at (tests only)."""

    __slots__ = ("_released", "_stopped", "_stopping", "pause_at", "topic")  # one per topic (issue 40)

    def __init__(self, topic: str, pause_at: Step | None = None) -> None:
        self.topic = topic
        self.pause_at = pause_at
        self._stopped = False
        #: What a compaction paused on its thread waits on: made only where a pause is set (an
        #: Event is a Condition, a lock and a deque: about 1 KiB for each of 100,000 topics).
        self._stopping = threading.Event() if pause_at is not None else None
        #: Set by ``stop`` for a compaction paused on the event loop (tests only).
        self._released: asyncio.Event | None = None

    def stop(self) -> None:
        """Stop a compaction under way at its next check (and release one paused)."""
        self._stopped = True
        if self._stopping is not None:
            self._stopping.set()
        if self._released is not None:
            self._released.set()

    @property
    def stopping(self) -> bool:
        return self._stopped

    def check(self, step: Step | None = None) -> None:
        """On the compactor's thread: raise CompactionStopped when stopping; at the pause step,
        wait until stopping (then raise it)."""
        if step is not None and step == self.pause_at and self._stopping is not None:
            self._paused(step)
            self._stopping.wait()
        if self._stopped:
            raise CompactionStopped(f"compaction of {self.topic} stopped: the broker is stopping")

    async def check_on_loop(self, step: Step) -> None:
        """At the pause step on the event loop (which goes on serving meanwhile): wait until
        stopping, then raise CompactionStopped. A commit is short: it is never stopped otherwise."""
        if step != self.pause_at:
            return
        self._paused(step)
        self._released = asyncio.Event()
        if self._stopped:
            self._released.set()
        await self._released.wait()
        raise CompactionStopped(f"compaction of {self.topic} stopped: the broker is stopping")

    def _paused(self, step: Step) -> None:
        log.warning("compaction of %s paused at %s (test_compaction_pause_at)", self.topic, step)
