"""Answers that read stored entries (a seek by time, a peek, an index look-up of PIP 70, the last
message id) without blocking the event loop on offloaded ledgers (docs/tiered-storage.md).

The answer is computed on the loop with reads that never wait (``PatientReader``): while it needs
bytes of an offloaded ledger that are being fetched, storage raises ``OffloadedReadPending``, the
loop goes on serving everyone, and the answer is computed again once the bytes are there (or the
store is found failing: then the reads fail at once with ``OffloadedReadError``). The entries a
search read are kept between tries, so each try goes further than the last; a search that only
touches local ledgers answers at once, as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from magnetar.storage.entry import EntryData
from magnetar.storage.errors import OffloadedReadError, OffloadedReadPending
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Answers computed again after a fetch: held here until done (the loop keeps tasks weakly).
_UNDER_WAY: set[asyncio.Future] = set()


class PatientReader:
    """An ``EntryReader`` (entry_search.py) that never waits for the object store, and keeps what
    it read for the next try of the same search. ``reads`` counts the entries read."""

    def __init__(self, ml: ManagedLedger) -> None:
        self.ml = ml
        self.reads = 0
        self._read: dict[Position, EntryData] = {}

    def __call__(self, position: Position) -> EntryData:
        data = self._read.get(position)
        if data is None:
            data = self._read[position] = self.ml.read_entry(position, wait=False).data
            self.reads += 1
        return data


async def answered(ml: ManagedLedger, work: Callable[[], _T], what: str) -> _T:
    """``work()``, computed again after each fetch of offloaded bytes it needs, never blocking the
    loop; ``OffloadedReadError`` when the store fails, or after ``offload_read_timeout_seconds``."""
    loop = asyncio.get_running_loop()
    timeout = ml.offload_read_timeout_seconds
    deadline = loop.time() + timeout
    while True:
        try:
            return work()
        except OffloadedReadPending as pending:
            woken: asyncio.Future[None] = loop.create_future()
            pending.then(partial(_wake, loop, woken))
            try:
                await asyncio.wait_for(woken, max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise OffloadedReadError(
                    f"{what}: offloaded data not read from the object store within {timeout:g} s"
                ) from None


def answer(
    ml: ManagedLedger,
    work: Callable[[], _T],
    what: str,
    done: Callable[[_T | None, BaseException | None], None],
) -> None:
    """``done(result, None)`` or ``done(None, error)``: at once when ``work()`` needs nothing being
    fetched, else on the loop once it is computed (``answered``)."""
    try:
        result = work()
    except OffloadedReadPending:
        pass
    except Exception as exc:
        done(None, exc)
        return
    else:
        done(result, None)
        return
    future = asyncio.ensure_future(answered(ml, work, what))
    _UNDER_WAY.add(future)

    def finished(future: asyncio.Future) -> None:
        _UNDER_WAY.discard(future)
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            done(None, error)
        else:
            done(future.result(), None)

    future.add_done_callback(finished)


def _wake(loop: asyncio.AbstractEventLoop, woken: asyncio.Future[None]) -> None:
    """On the fetching thread (or at once): wake the answer waiting on the loop."""
    try:
        loop.call_soon_threadsafe(_resolve, woken)
    except RuntimeError:  # the loop is closed: nobody waits any more
        log.debug("offloaded data fetched after the broker's loop stopped")


def _resolve(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)
