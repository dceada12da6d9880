"""Memory for large frames being received, all connections together (``max_incomplete_frame_bytes``).

A frame of ``LARGE_FRAME`` bytes or more that is still arriving is read into a buffer of its
own, the frame's declared size (protocol/frames.py). Without a bound, connections that each
declare a 5 MiB frame and send part of it would make the broker set aside 5 MiB apiece. So
a connection must *reserve* the frame's size here before its buffer is made. When there is
no room it waits in line (its connection is not read meanwhile: ``Hold.FRAMES``), and gets
the room, first come first served, as other frames complete or their connections close.

A frame that holds its room for ``timeout`` seconds without completing while others wait is
*overdue*: honest clients write a frame in one go, so the broker closes such a connection
(``BrokerService``) rather than let it keep everyone else waiting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from magnetar.broker.flow_control import ReadHolds


class FrameReceiver(Protocol):
    """Who reserves room: a connection receiving a large frame (``ServerCnx``)."""

    @property
    def remote(self) -> str: ...

    @property
    def holds(self) -> ReadHolds:
        """Why it is not read now: a connection held for the broker's reasons is not to blame."""
        ...

    def frame_room_granted(self) -> None:
        """Its turn came: it may be read again."""
        ...

    def close_for_stalled_frame(self, size: int, seconds: float) -> None:
        """Its frame held room too long while others waited."""
        ...


class FrameBudget:
    """Reservations of bytes against ``limit`` (0: no limit), and a first-come line of waiters.

    A reservation larger than the whole limit is still granted when nothing else is reserved,
    so every frame the protocol allows can be received (one at a time).
    """

    __slots__ = ("bytes", "holders", "limit", "times_full", "waiters")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Bytes reserved now.
        self.bytes = 0
        #: Who holds room: owner -> (bytes, when reserved).
        self.holders: dict[FrameReceiver, tuple[int, float]] = {}
        #: Who waits for room, in order of arrival: owner -> bytes wanted.
        self.waiters: dict[FrameReceiver, int] = {}
        #: Times a reservation had to wait with nobody waiting before it (the budget became full).
        self.times_full = 0

    def reserve(self, owner: FrameReceiver, size: int, now: float) -> bool:
        """True if ``owner`` holds room (reserved now or granted earlier); else it waits in line
        (once: asking again changes nothing) until ``release``/``cancel`` grants it."""
        if owner in self.holders:
            return True
        if owner in self.waiters:
            return False
        if not self.waiters and self._fits(size):
            self._take(owner, size, now)
            return True
        if not self.waiters:
            self.times_full += 1
        self.waiters[owner] = size
        return False

    def release(self, owner: FrameReceiver, now: float) -> list[FrameReceiver]:
        """``owner`` gives its room back (or leaves the line); returns the waiters granted room now."""
        held = self.holders.pop(owner, None)
        if held is not None:
            self.bytes -= held[0]
        self.waiters.pop(owner, None)
        return self._grant(now)

    def overdue(self, now: float, timeout: float) -> list[FrameReceiver]:
        """Holders that have held their room for ``timeout`` seconds or more, oldest first, while
        someone waits (none otherwise)."""
        if not self.waiters:
            return []
        late = [(since, owner) for owner, (_, since) in self.holders.items() if now - since >= timeout]
        return [owner for _, owner in sorted(late, key=lambda item: item[0])]

    def _fits(self, size: int) -> bool:
        return self.limit <= 0 or not self.holders or self.bytes + size <= self.limit

    def _take(self, owner: FrameReceiver, size: int, now: float) -> None:
        self.holders[owner] = (size, now)
        self.bytes += size

    def _grant(self, now: float) -> list[FrameReceiver]:
        granted = []
        while self.waiters:
            owner, size = next(iter(self.waiters.items()))
            if not self._fits(size):
                break
            del self.waiters[owner]
            self._take(owner, size, now)
            granted.append(owner)
        return granted
