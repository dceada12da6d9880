"""A broadcast subscription's virtual cursors kept durable, by consumer name
(``storage.virtual_cursors``), so that a consumer resumes where it was after a restart.

An ack only marks its consumer's virtual cursor changed here; the changed ones are handed to
storage together (``save``, on the cursor flush schedule and at shutdown), which writes them in
one transaction. A consumer that leaves for good has its stored virtual cursor deleted the same
way.
"""

from __future__ import annotations

from collections.abc import Iterator

from magnetar.broker.dispatchers.virtual_cursor import NextPosition, VirtualCursor
from magnetar.storage.position import Position
from magnetar.storage.virtual_cursors import VirtualCursorState, VirtualCursorStore


class SavedVirtualCursors:
    def __init__(self, store: VirtualCursorStore) -> None:
        self.store = store
        #: Changed since the last ``save``, by consumer name: the cursor to store, or None to
        #: delete its stored state. The dispatcher writes here on every ack (no call).
        self.changes: dict[str, VirtualCursor | None] = {}

    def restore(
        self, start: Position, next_position: NextPosition, min_epoch: int = 0
    ) -> Iterator[tuple[str, VirtualCursor]]:
        """The virtual cursors stored before a restart, moved up to ``start`` (the subscription's
        mark-delete position: what it acknowledged for everyone since, by skip or expiry); those
        stored before the subscription's ``min_epoch``-th reset (a seek) are not."""
        for name, state in self.store.load().items():
            if state.epoch < min_epoch:
                continue
            vc = VirtualCursor.from_state(state, next_position(state.mark_delete))
            vc.skip_to(start, next_position)
            yield name, vc

    def clear(self) -> None:
        """Every stored one is deleted at the next flush (a seek, or another subscription type)."""
        self.store.clear()
        self.changes = {}

    def save(self, epoch: int = 0) -> None:
        """Hand the changes since the last call to storage (written at its next flush), each
        marked with the subscription's resets known here (``epoch``)."""
        store, changes = self.store, self.changes
        if not changes:
            return
        self.changes = {}
        shared: dict[Position, VirtualCursorState] = {}
        for name, vc in changes.items():
            if vc is None:
                store.remove(name)
            else:
                store.put(name, vc.state(shared, epoch))

    def stats(self) -> dict[str, int]:
        store = self.store
        return {
            "virtualCursorFlushes": store.flushes,
            "virtualCursorsWritten": store.written,
            "virtualCursorsDeleted": store.deleted,
        }
