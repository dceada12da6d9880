"""Virtual cursors kept for broadcast consumers that left (*detached*): a consumer whose connection
was lost keeps its virtual cursor for ``broadcast_reconnect_grace_seconds``, and one of the same
name subscribing in that time takes it back. So do the virtual cursors restored after a restart,
until their consumers come back.

Each is kept with the timer that gives it up; the dispatcher is told (``given_up``) so that it
stops holding the subscription's messages for it. While kept, its mark-delete position stays in
the dispatcher's floor: the dispatcher adds and removes it there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from magnetar.broker.dispatchers.virtual_cursor import VirtualCursor

#: A detached virtual cursor and the timer that gives it up.
Kept = tuple[VirtualCursor, asyncio.TimerHandle]


class DetachedVirtualCursors:
    def __init__(self, grace_seconds: float, given_up: Callable[[str, VirtualCursor], None]) -> None:
        self.grace_seconds = grace_seconds
        self._given_up = given_up
        #: By consumer name, in the order they were detached.
        self.kept: dict[str, Kept] = {}

    def __len__(self) -> int:
        return len(self.kept)

    def keep(self, name: str, vc: VirtualCursor) -> VirtualCursor | None:
        """Keep ``vc`` for the grace period; the one it replaces (two consumers of one name left:
        the later one's counts), no longer kept and not given up through ``given_up``."""
        older = self.kept.pop(name, None)
        if older is not None:
            older[1].cancel()
        timer = asyncio.get_running_loop().call_later(self.grace_seconds, self._expire, name, vc)
        self.kept[name] = (vc, timer)
        return older[0] if older is not None else None

    def take(self, name: str) -> VirtualCursor | None:
        """A consumer of this name is back within its grace period: its virtual cursor, no longer kept."""
        kept = self.kept.pop(name, None)
        if kept is None:
            return None
        kept[1].cancel()
        return kept[0]

    def drop(self, name: str) -> None:
        """Give it up now, before its grace ends (the lag policy)."""
        kept = self.kept.get(name)
        if kept is not None:
            kept[1].cancel()
            self._expire(name, kept[0])

    def clear(self) -> list[VirtualCursor]:
        """Stop keeping any (a seek, the dispatcher closing); those that were kept."""
        for _, timer in self.kept.values():
            timer.cancel()
        dropped = [vc for vc, _ in self.kept.values()]
        self.kept.clear()
        return dropped

    def _expire(self, name: str, vc: VirtualCursor) -> None:
        kept = self.kept.get(name)
        if kept is None or kept[0] is not vc:
            return
        del self.kept[name]
        self._given_up(name, vc)
