"""Waiting until a managed ledger's adds up to a position are stored (or it has failed): what
``terminate`` answers after, so it never names a position that may yet be lost."""

from __future__ import annotations

import asyncio

from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position


class StoreWaiters:
    def __init__(self, ml: ManagedLedger) -> None:
        self._ml = ml
        self._waiters: list[tuple[Position, asyncio.Future[None]]] = []

    def __bool__(self) -> bool:
        """True while anything waits (the publish path checks before calling ``release``)."""
        return bool(self._waiters)

    async def stored_up_to(self, position: Position) -> None:
        """Wait until the adds up to ``position`` are durable, or the managed ledger has failed."""
        if self._ml.last_confirmed >= position or self._ml.fenced:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((position, waiter))
        await waiter

    def release(self, failed: bool) -> None:
        """After an add completed: wake the waiters it satisfies (all of them when it failed: the
        managed ledger is fenced and what it confirmed is final)."""
        confirmed = self._ml.last_confirmed
        waiting = []
        for position, waiter in self._waiters:
            if failed or position <= confirmed:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                waiting.append((position, waiter))
        self._waiters = waiting
