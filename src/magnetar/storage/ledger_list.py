"""The ordered ledgers of a managed ledger and how positions step across them."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from magnetar.storage.position import Position


class LedgerList:
    """Ledger ids in order with their entry counts: all that position arithmetic needs.

    The last ledger is the open one: positions past its end are "not written
    yet" rather than invalid, so stepping forward from the last entry lands one
    past it (where the next add will go). A position in a ledger that no longer
    exists (trimmed) steps to the start of the next ledger that does.
    """

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._counts: dict[int, int] = {}

    def append(self, ledger_id: int, entries: int = 0) -> None:
        if self._ids and ledger_id <= self._ids[-1]:
            raise ValueError(f"ledger {ledger_id} is not after ledger {self._ids[-1]}")
        self._ids.append(ledger_id)
        self._counts[ledger_id] = entries

    def remove(self, ledger_id: int) -> None:
        self._ids.pop(bisect_left(self._ids, ledger_id))
        del self._counts[ledger_id]

    def set_count(self, ledger_id: int, entries: int) -> None:
        self._counts[ledger_id] = entries

    def count(self, ledger_id: int) -> int:
        """Entries in that ledger; 0 when it does not exist."""
        return self._counts.get(ledger_id, 0)

    def ids(self) -> list[int]:
        return list(self._ids)

    @property
    def last_id(self) -> int:
        return self._ids[-1]

    def __contains__(self, ledger_id: int) -> bool:
        return ledger_id in self._counts

    def exists(self, position: Position) -> bool:
        return 0 <= position.entry_id < self._counts.get(position.ledger_id, 0)

    def ceil(self, position: Position) -> Position:
        """The first position at or after ``position`` that holds an entry or is still to be written."""
        ledger_id, entry_id = position.ledger_id, max(position.entry_id, 0)
        if ledger_id in self._counts and (ledger_id == self._ids[-1] or entry_id < self._counts[ledger_id]):
            return Position(ledger_id, entry_id)
        for later in self._ids[bisect_right(self._ids, ledger_id) :]:
            if self._counts[later] > 0 or later == self._ids[-1]:
                return Position(later, 0)
        return Position(ledger_id, entry_id)

    def next_position(self, position: Position) -> Position:
        return self.ceil(Position(position.ledger_id, position.entry_id + 1))

    def previous_position(self, position: Position) -> Position:
        """The position just before ``position``: the last entry of an earlier ledger when at a start.

        With nothing before it, ``(ledger, -1)``: "before the first entry".
        """
        if position.entry_id > 0:
            return Position(position.ledger_id, position.entry_id - 1)
        for earlier in reversed(self._ids[: bisect_left(self._ids, position.ledger_id)]):
            if self._counts[earlier] > 0:
                return Position(earlier, self._counts[earlier] - 1)
        return Position(position.ledger_id, -1)

    def last_position(self) -> Position:
        """The last entry, or ``(open ledger, -1)`` when there is none."""
        for ledger_id in reversed(self._ids):
            if self._counts[ledger_id] > 0:
                return Position(ledger_id, self._counts[ledger_id] - 1)
        return Position(self._ids[-1], -1)

    def first_position(self) -> Position | None:
        for ledger_id in self._ids:
            if self._counts[ledger_id] > 0:
                return Position(ledger_id, 0)
        return None

    def number_of_entries(self, start: Position, end: Position) -> int:
        """Entries that exist in ``[start, end]``."""
        total = 0
        lo_index = bisect_left(self._ids, start.ledger_id)
        hi_index = bisect_right(self._ids, end.ledger_id)
        for ledger_id in self._ids[lo_index:hi_index]:
            count = self._counts[ledger_id]
            first = max(start.entry_id, 0) if ledger_id == start.ledger_id else 0
            last = min(end.entry_id, count - 1) if ledger_id == end.ledger_id else count - 1
            total += max(0, last - first + 1)
        return total
