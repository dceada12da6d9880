"""Work deferred to the end of the event loop's current pass, run in a fixed order of phases.

A message's way through the broker is: its entry is fsynced with the others of
the pass (``SYNC``, group commit on the loop), the add completes (``COMPLETE``), the topic
wakes its subscriptions (``WAKE``), dispatchers send (``DISPATCH``), connections
write their queued frames (``FLUSH``). Scheduled one ``call_soon`` each, those
steps would take a loop pass apiece, each pass an ``epoll_wait``, and a receipt
and the message it releases would leave in two socket writes. Deferred here they
run in one pass, in that order, so everything a pass produced leaves in one write
per connection, as Netty and Kafka's network threads flush at the end of a
select round.

Work deferred to a phase that has already run in the current pass goes to the
next pass, so a dispatcher that asks for another round (more to send after a
bounded read) yields to the socket reads waiting behind it, as with ``call_soon``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable

log = logging.getLogger(__name__)

SYNC = 0
COMPLETE = 1
WAKE = 2
DISPATCH = 3
FLUSH = 4
_PHASES = 5

Callback = Callable[[], None]


class PassScheduler:
    """The deferred work of one event loop, in phases; see the module docstring."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._queues: list[list[Callback]] = [[] for _ in range(_PHASES)]
        self._scheduled = False
        self._running = -1  # the phase now running; -1 between runs

    def defer(self, phase: int, callback: Callback) -> None:
        """Run ``callback`` at the end of this pass (or the next one, if ``phase`` has run already)."""
        self._queues[phase].append(callback)
        if phase > self._running >= 0:
            return  # the run in progress reaches that phase
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._run)

    def run_now(self, callback: Callback) -> None:
        """Run ``callback`` as a completion and every phase after it at once.

        For a callback that already is a loop callback of its own (a completion
        handed over from the fsync thread): waiting for another pass would only
        cost one more ``epoll_wait``.
        """
        if self._running >= 0:
            self.defer(COMPLETE, callback)
            return
        self._queues[COMPLETE].append(callback)
        self._run()

    def _run(self) -> None:
        self._scheduled = False
        queues = self._queues
        try:
            for phase in range(_PHASES):
                self._running = phase
                batch = queues[phase]
                if batch:
                    queues[phase] = []
                    for callback in batch:
                        try:
                            callback()
                        except Exception:
                            log.exception("deferred %r raised", callback)
        finally:
            self._running = -1


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PassScheduler] = weakref.WeakKeyDictionary()


def for_loop(loop: asyncio.AbstractEventLoop) -> PassScheduler:
    """The loop's scheduler, made on first use."""
    scheduler = _by_loop.get(loop)
    if scheduler is None:
        scheduler = _by_loop[loop] = PassScheduler(loop)
    return scheduler


def current() -> PassScheduler:
    """The running loop's scheduler (call from the loop's thread)."""
    return for_loop(asyncio.get_running_loop())
