"""Entries a broadcast dispatcher has read and some consumer has still to be sent.

Consumers of a broadcast subscription reach an entry in different dispatch rounds (a round
serves at most ``fanout_per_round`` of them, and entries arrive in between). Kept here from the
first read until every consumer has read past it, an entry is read from storage once for all.
The window is bounded: past its limits the oldest entries go first, and a consumer that far
behind reads from the entry cache or the files again.
"""

from __future__ import annotations

from magnetar.broker.entries import DispatchEntry
from magnetar.storage.position import Position


class EntryWindow:
    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        #: In the order read, which is position order but for a consumer far behind the others.
        self._entries: dict[Position, DispatchEntry] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, position: Position) -> DispatchEntry | None:
        return self._entries.get(position)

    def add(self, item: DispatchEntry) -> None:
        if item.position in self._entries:
            return
        self._entries[item.position] = item
        self.bytes += len(item.data)
        while len(self._entries) > self.max_entries or (
            self.bytes > self.max_bytes and len(self._entries) > 1
        ):
            self._pop_oldest()

    def evict_below(self, position: Position | None) -> None:
        """Forget the oldest entries up to the first at or after ``position`` (every consumer reads
        at or after it); all if None."""
        if position is None:
            self._entries = {}
            self.bytes = 0
            return
        entries = self._entries
        while entries and next(iter(entries)) < position:
            self._pop_oldest()

    def _pop_oldest(self) -> None:
        entries = self._entries
        self.bytes -= len(entries.pop(next(iter(entries))).data)
