"""Where an entry lives: ``(ledger_id, entry_id)``, ordered like Pulsar's ``PositionImpl``."""

from __future__ import annotations

from typing import ClassVar, NamedTuple


class _Address(NamedTuple):
    ledger_id: int
    entry_id: int


class Position(_Address):
    """An entry's address in a managed ledger.

    Positions order by ledger, then entry, so comparing two positions tells which
    was written first even across ledger boundaries. ``entry_id == -1`` means
    "before the first entry of that ledger"; ``Position.EARLIEST`` sits before
    every ledger. A named tuple: positions are made, hashed and compared on every
    message, and tuples do all three in C. (The fields are the base's: a named tuple's body
    takes no class attribute such as ``EARLIEST``.)
    """

    __slots__ = ()
    EARLIEST: ClassVar[Position]

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


#: Before every ledger.
Position.EARLIEST = Position(-1, -1)
