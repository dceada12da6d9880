"""The broadcast dispatcher's reads: one read of each entry, shared by every consumer reading it.

Entries stay read in a window until every consumer has read past them (``EntryWindow``), so
consumers reaching a position in different rounds (more of them than ``fanout_per_round``, or
entries stored in between) share one read of each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.dispatchers.base import MAX_READ_BYTES
from magnetar.broker.dispatchers.entry_window import EntryWindow
from magnetar.broker.entries import DispatchEntry
from magnetar.broker.errors import ServiceNotReady
from magnetar.storage.errors import OffloadedReadPending
from magnetar.storage.owner_ref import OwnerRef
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.topic_api import CursorSubscription

#: Most entries and bytes kept read for consumers that have still to be sent them.
WINDOW_ENTRIES = 1000
WINDOW_BYTES = 2 * MAX_READ_BYTES


def after(position: Position) -> Position:
    """Where to read next: a read from here steps into the next ledger by itself when this one has ended."""
    return Position(position.ledger_id, position.entry_id + 1)


class SharedReads:
    @property
    def subscription(self) -> CursorSubscription[Consumer]:
        return self._subscription()

    def __init__(self, subscription: CursorSubscription[Consumer], max_read_batch: int) -> None:
        #: Held weakly: the subscription owns its dispatcher (storage/owner_ref.py).
        self._subscription = OwnerRef(subscription, "subscription", subscription.name, ServiceNotReady)
        self.ml = subscription.topic.ml
        self.max_read_batch = max_read_batch
        self.window = EntryWindow(WINDOW_ENTRIES, WINDOW_BYTES)
        #: Reads from the entry cache or files, and the entries they returned (for stats and tests:
        #: consumers at one position share a read).
        self.reads = 0
        self.entries_read = 0

    def read(self, position: Position, max_messages: int) -> tuple[list[DispatchEntry], Position]:
        """Entries from ``position`` that the subscription has not acknowledged for everyone, and
        the position to read from next."""
        last = self.ml.last_confirmed
        if position > last:
            return [], position
        count = max(1, min(max_messages, self.max_read_batch))
        window = self.window
        entries: list[DispatchEntry] = []
        budget = MAX_READ_BYTES
        next_position = position
        while len(entries) < count and (item := window.get(next_position)) is not None:
            if entries and len(item.data) > budget:
                return self._unsettled(entries), next_position
            entries.append(item)
            budget -= len(item.data)
            next_position = after(next_position)
        if len(entries) < count and next_position <= last and budget > 0:
            try:  # offloaded entries are not waited for on the loop (the dispatcher is woken)
                raw = self.ml.read_entries(
                    next_position, count - len(entries), budget, at_least_one=not entries, wait=False
                )
            except OffloadedReadPending:
                if not entries:
                    raise
                raw = []
            if raw:
                self.reads += 1
                self.entries_read += len(raw)
                recent = self.subscription.topic.recent_entries.entry
                for entry in raw:
                    item = recent(entry)
                    window.add(item)
                    entries.append(item)
                next_position = after(raw[-1].position)
        return self._unsettled(entries), next_position

    def _unsettled(self, entries: list[DispatchEntry]) -> list[DispatchEntry]:
        settled = self.subscription.cursor.is_acked
        return [e for e in entries if not settled(e.position)]
