"""ManagedCursor: a subscription's read position and acknowledgment state."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from magnetar.storage.ack_ranges import AckRanges
from magnetar.storage.batch_acks import BatchAcks, to_signed
from magnetar.storage.cursor_state import CursorState
from magnetar.storage.entry import Entry
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.storage.managed_ledger import ManagedLedger


class ManagedCursor:
    """What one subscription has read and acknowledged in a managed ledger.

    Everything at or before ``mark_delete_position`` is acknowledged. After it,
    acknowledged entries are "individually deleted" (kept as ranges per ledger)
    and batch entries may be partly acknowledged (kept as BitSets). The mark-delete
    position always sits at the end of the contiguous acknowledged prefix, so
    individual acks that close a hole move it forward at once.

    ``read_position`` is the next entry to hand out; it is not persisted: after a
    restart a cursor reads again from just after its mark-delete position, as in
    Pulsar. A durable cursor persists its state on ``flush`` and holds retention;
    a non-durable one (readers) does neither.

    Not thread-safe: call it from the thread that owns the managed ledger.
    """

    def __init__(self, ledger: ManagedLedger, name: str, durable: bool, state: CursorState):
        self._ledger = ledger
        self.name = name
        self.durable = durable
        self._mark_delete = state.mark_delete
        self._acks = AckRanges()
        for ledger_id, start, end in state.individually_deleted:
            self._acks.add_range(ledger_id, start, end)
        self._batch = BatchAcks()
        for position, words in state.batch_acks:
            self._batch.set(position, words)
        self._dirty = False
        self._drop_state_past(ledger.last_confirmed)
        self._read_position = ledger.next_position(self._mark_delete)

    def __repr__(self) -> str:
        return (
            f"ManagedCursor({self.name!r}, durable={self.durable}, mark_delete={self._mark_delete},"
            f" read={self._read_position}, individually_deleted={len(self._acks)})"
        )

    # ------------------------------------------------------------------- state

    @property
    def mark_delete_position(self) -> Position:
        return self._mark_delete

    @property
    def read_position(self) -> Position:
        return self._read_position

    @property
    def dirty(self) -> bool:
        """True when the state changed since it was last persisted."""
        return self._dirty

    def is_acked(self, position: Position) -> bool:
        return position <= self._mark_delete or position in self._acks

    def batch_ack_set(self, position: Position) -> list[int] | None:
        words = self._batch.get(position)
        return None if words is None else to_signed(words)

    def individually_deleted_count(self) -> int:
        return len(self._acks)

    def individually_deleted_ranges(self) -> list[tuple[int, int, int]]:
        """``(ledger_id, start, end)`` half-open ranges of entry ids acked after the mark-delete position."""
        return list(self._acks.triples())

    def backlog(self) -> int:
        ledger = self._ledger
        last = ledger.last_confirmed
        start = ledger.next_position(self._mark_delete)
        if start > last:
            return 0
        return max(0, ledger.number_of_entries(start, last) - len(self._acks))

    def snapshot(self) -> CursorState:
        """The state as it would be persisted."""
        batch = [(position, to_signed(words)) for position, words in self._batch.items()]
        return CursorState(self._mark_delete, list(self._acks.triples()), batch)

    # ------------------------------------------------------------------- reads

    def read_entries(self, max_entries: int, max_bytes: int | None = None) -> list[Entry]:
        """Read from ``read_position``, skipping acknowledged entries, and move past what was read.

        Returns at least one entry when any is readable, even if it alone exceeds ``max_bytes``.
        """
        ledger = self._ledger
        last = ledger.last_confirmed
        out: list[Entry] = []
        budget = max_bytes
        position = self._skip_acked(self._read_position)
        while len(out) < max_entries and position <= last:
            run = min(
                max_entries - len(out), ledger.entries_in_ledger(position.ledger_id) - position.entry_id
            )
            next_acked = self._acks.next_acked_in_ledger(position)
            if next_acked is not None:
                run = min(run, next_acked - position.entry_id)
            got = ledger.read_entries(position, run, budget, at_least_one=not out)
            if not got:
                break
            out.extend(got)
            if budget is not None:
                budget -= sum(len(entry.data) for entry in got)
            position = self._skip_acked(ledger.next_position(got[-1].position))
            if len(got) < run:
                break
        self._read_position = position
        return out

    def has_more_entries(self) -> bool:
        return self._skip_acked(self._read_position) <= self._ledger.last_confirmed

    def seek(self, position: Position) -> None:
        """Read from ``position`` next (replay); never before the first unacknowledged entry."""
        ledger = self._ledger
        self._read_position = max(ledger.ceil_position(position), ledger.next_position(self._mark_delete))

    def rewind(self) -> None:
        """Read again from the first entry after the mark-delete position."""
        self._read_position = self._ledger.next_position(self._mark_delete)

    def reset(self, position: Position) -> None:
        """Pulsar's resetCursor: forget every ack and start over at ``position``."""
        ledger = self._ledger
        start = ledger.ceil_position(position)
        self._acks.clear()
        self._batch.clear()
        self._mark_delete = ledger.previous_position(start)
        self._read_position = start
        self._dirty = True

    # -------------------------------------------------------------------- acks

    def mark_delete(self, position: Position) -> None:
        """Cumulative ack of everything <= ``position`` (clamped to the last confirmed entry)."""
        position = min(position, self._ledger.last_confirmed)
        if position <= self._mark_delete:
            return
        self._mark_delete = position
        self._advance_mark_delete()
        self._dirty = True

    def delete(self, positions: Iterable[Position]) -> None:
        """Individual acks; positions already acked or holding no readable entry are ignored."""
        ledger = self._ledger
        changed = False
        for position in positions:
            if position <= self._mark_delete or not ledger.has_entry(position):
                continue
            self._batch.discard(position)
            changed = self._acks.add(position) or changed
        if changed:
            self._advance_mark_delete()
            self._dirty = True

    def ack_batch_indexes(self, position: Position, unacked_words: list[int], batch_size: int) -> bool:
        """AND ``unacked_words`` (a Java BitSet's ``long[]``) into the entry's still-unacked set.

        Returns True once no message of the batch is left, and then the entry
        counts as individually deleted.
        """
        if self.is_acked(position):
            return True
        if not self._ledger.has_entry(position):
            return False
        all_acked, changed = self._batch.apply(position, unacked_words, batch_size)
        if all_acked:
            self.delete([position])
            return True
        if changed:
            self._dirty = True
        return False

    def flush(self) -> None:
        """Persist the state if it changed (durable cursors only)."""
        if self.durable and self._dirty:
            self._ledger.persist_cursors([self])

    def mark_clean(self) -> None:
        """Called by the managed ledger once the snapshot it took is committed."""
        self._dirty = False

    # --------------------------------------------------------------- internals

    def _skip_acked(self, position: Position) -> Position:
        ledger = self._ledger
        position = ledger.ceil_position(position)
        if position <= self._mark_delete:
            position = ledger.next_position(self._mark_delete)
        while (end := self._acks.run_end(position)) != position.entry_id:
            position = ledger.next_position(Position(position.ledger_id, end - 1))
        return position

    def _advance_mark_delete(self) -> None:
        """Move the mark-delete position over the acked run right after it, crossing ledgers."""
        ledger = self._ledger
        while True:
            following = ledger.next_position(self._mark_delete)
            end = self._acks.run_end(following)
            if end == following.entry_id:
                break
            self._mark_delete = Position(following.ledger_id, end - 1)
        self._acks.remove_up_to(self._mark_delete)
        self._batch.remove_up_to(self._mark_delete)
        if self._read_position <= self._mark_delete:
            self._read_position = ledger.next_position(self._mark_delete)

    def _drop_state_past(self, last: Position) -> None:
        """On recovery, forget acks of entries that did not survive (possible with fsync "never")."""
        if self._mark_delete > last:
            self._mark_delete = last
            self._dirty = True
        self._acks.remove_up_to(self._mark_delete)
        self._batch.remove_up_to(self._mark_delete)
        dropped_acks = self._acks.remove_after(last)
        dropped_batches = self._batch.remove_after(last)
        if dropped_acks or dropped_batches:
            self._dirty = True
