"""Where an entry lives: ``(ledger_id, entry_id)``, ordered like Pulsar's ``PositionImpl``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """An entry's address in a managed ledger.

    Positions order by ledger, then entry, so comparing two positions tells which
    was written first even across ledger boundaries. ``entry_id == -1`` means
    "before the first entry of that ledger"; ``Position.EARLIEST`` sits before
    every ledger.
    """

    ledger_id: int
    entry_id: int

    EARLIEST: ClassVar[Position]

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


Position.EARLIEST = Position(-1, -1)
