"""Keepalive for every connection from one wheel, not a timer per connection.

A timer per connection costs ~600 bytes (an event-loop timer handle and what it holds) and one
more object for the loop to keep sorted; at 100K connections that is 60 MB and a crowded
timer heap. Here each connection is put in one of ``SLOTS`` sets, and the wheel turns one slot
every ``interval / SLOTS`` seconds, so every connection is looked at once per interval, and a
turn handles a fraction of the connections (no pause of the loop for all of them at once).

What a connection does when looked at is Pulsar's rule (``ServerCnx.keepalive_tick``): closed
if it has not sent CONNECT, or has not answered the last PING; else sent a PING. A connection
is first looked at after it has lived a whole interval, so it is pinged or closed between one
and two intervals after it came.
"""

from __future__ import annotations

from typing import Protocol

#: Slots of the wheel: a turn looks at about 1/SLOTS of the connections.
SLOTS = 16


class KeptAlive(Protocol):
    def keepalive_tick(self, now: float) -> None:
        """Looked at once per interval; ``now`` is the event loop's time."""
        ...


class KeepaliveWheel:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._slots: list[set[KeptAlive]] = [set() for _ in range(SLOTS)]
        self._next_slot = 0  # where the next connection goes
        self._turn = 0  # the slot the next turn looks at

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    @property
    def turn_seconds(self) -> float:
        """How often ``turn`` must be called."""
        return self.interval / SLOTS

    def __len__(self) -> int:
        return sum(len(slot) for slot in self._slots)

    def add(self, connection: KeptAlive) -> int:
        """Put ``connection`` on the wheel; the slot it went to (give it to ``remove``)."""
        slot = self._next_slot
        self._next_slot = (slot + 1) % SLOTS
        self._slots[slot].add(connection)
        return slot

    def remove(self, connection: KeptAlive, slot: int) -> None:
        self._slots[slot].discard(connection)

    def turn(self, now: float) -> None:
        """Look at the next slot's connections."""
        slot = self._slots[self._turn]
        self._turn = (self._turn + 1) % SLOTS
        for connection in list(slot):
            connection.keepalive_tick(now)
