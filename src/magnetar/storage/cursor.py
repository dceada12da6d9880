"""ManagedCursor: a subscription's read position and acknowledgment state."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from magnetar.storage.ack_state import IndividualAcks
from magnetar.storage.batch_acks import to_signed
from magnetar.storage.cursor_state import CursorState
from magnetar.storage.entry import Entry
from magnetar.storage.errors import OffloadedReadPending
from magnetar.storage.owner_ref import OwnerRef
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.storage.cursor_store import CursorStore
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

    A subscription reading a topic's compacted view may be placed before the managed ledger's
    first entry (``reset_exactly``): the view keeps messages of ledgers trimmed since. Its
    mark-delete position then lies in those ledgers, it keeps acknowledgements of the view's
    messages there, and the mark-delete position moves over them as over entries
    (``ManagedLedger.compacted_after``); just after it is where a compacted read goes on, while
    a plain read steps to the first entry.

    A durable cursor's acks live in its cursor ledger (``CursorStore``), one page
    per ledger, and only a bounded number of pages stay in memory (PIP 81).

    Not thread-safe: call it from the thread that owns the managed ledger.
    """

    def __init__(
        self,
        ledger: ManagedLedger,
        name: str,
        durable: bool,
        state: CursorState,
        store: CursorStore | None = None,
    ):
        """``state`` is the starting state unless ``store`` recovered one from its cursor ledger."""
        self._owner = OwnerRef(ledger, "managed ledger", ledger.name)
        self.name = name
        self.durable = durable
        self._store = store
        if store is None:
            self._acks = IndividualAcks()
        else:
            self._acks = IndividualAcks(store, store.memory_limit)
        if store is not None and store.recovered is not None:
            self._mark_delete = store.recovered.mark_delete
            self._acks.load(store.recovered.pages)
            self._dirty = False
        else:
            self._mark_delete = state.mark_delete
            for ledger_id, start, end in state.individually_deleted:
                self._acks.add_range(ledger_id, start, end)
            for position, words in state.batch_acks:
                self._acks.set_batch(position, words)
            self._dirty = store is not None  # a new cursor ledger gets its first marker at the next flush
        self._drop_state_past(ledger.last_confirmed)
        self._read_position = self._after_mark_delete()
        #: How many times its state was persisted: an acknowledgement seen in it before a
        #: persist is on disk after it.
        self.persists = 0

    def __repr__(self) -> str:
        return (
            f"ManagedCursor({self.name!r}, durable={self.durable}, mark_delete={self._mark_delete},"
            f" read={self._read_position}, individually_deleted={len(self._acks)})"
        )

    @property
    def _ledger(self) -> ManagedLedger:
        """The managed ledger, held weakly (owner_ref.py): StorageClosedError once it is gone."""
        return self._owner()

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
        words = self._acks.batch(position)
        return None if words is None else to_signed(words)

    def individually_deleted_count(self) -> int:
        return len(self._acks)

    def individually_deleted_ranges(self) -> list[tuple[int, int, int]]:
        """``(ledger_id, start, end)`` half-open ranges of entry ids acked after the mark-delete position.

        Reads every page, swapped out or not: meant for tests and tools.
        """
        return [(page.ledger_id, s, e) for page in self._acks.pages() for s, e in page.ranges.ranges()]

    def backlog(self) -> int:
        ledger = self._ledger
        last = ledger.last_confirmed
        start = ledger.next_position(self._mark_delete)
        if start > last:
            return 0
        acked = len(self._acks)
        if self._mark_delete < (before_first := ledger.before_first()):
            acked -= self._acks.acked_before(before_first.ledger_id)  # the compacted view's, not entries
        return max(0, ledger.number_of_entries(start, last) - acked)

    def snapshot(self) -> CursorState:
        """The whole state in the earlier one-row form (reads every page: for tests and tools)."""
        batch = [
            (Position(page.ledger_id, entry_id), to_signed(page.batches[entry_id]))
            for page in self._acks.pages()
            for entry_id in sorted(page.batches)
        ]
        return CursorState(self._mark_delete, self.individually_deleted_ranges(), batch)

    def stats(self) -> dict[str, int | str | None]:
        """Figures of the ack state: holes, pages, memory, and what flushes wrote."""
        acks = self._acks
        figures: dict[str, int | str | None] = {
            "mark_delete_position": str(self._mark_delete),
            "individually_deleted": len(acks),
            "holes": acks.range_count,
            "partial_batches": acks.partial_batches,
            "pages": acks.page_count,
            "pages_in_memory": acks.resident_count,
            "dirty_pages": acks.dirty_count,
            "memory_bytes": acks.memory_bytes,
            "memory_limit_bytes": acks.memory_limit,
            "swap_ins": acks.swap_ins,
            "swap_outs": acks.swap_outs,
        }
        if self._store is not None:
            figures.update(self._store.stats())
        return figures

    # ------------------------------------------------------------------- reads

    def read_entries(self, max_entries: int, max_bytes: int | None = None, wait: bool = True) -> list[Entry]:
        """Read from ``read_position``, skipping acknowledged entries, and move past what was read.

        Returns at least one entry when any is readable, even if it alone exceeds ``max_bytes``.
        ``wait``: as ``ManagedLedger.read_entries`` (without it, offloaded entries being fetched end
        the read, or raise ``OffloadedReadPending`` when nothing was read before them).
        """
        ledger = self._ledger
        position = self._read_position
        if (
            self._acks.empty
            and position.ledger_id == ledger.current_ledger_id
            and position > self._mark_delete
        ):
            # At the tail with nothing acked out of order, the common case of a consumer that keeps up:
            # no entry to skip, and positions in the open ledger need no stepping across ledgers.
            got = ledger.read_entries(position, max_entries, max_bytes, wait=wait)
            if got:
                self._read_position = Position(position.ledger_id, got[-1].position.entry_id + 1)
            return got
        last = ledger.last_confirmed
        out: list[Entry] = []
        budget = max_bytes
        position = self._skip_acked(position)
        while len(out) < max_entries and position <= last:
            run = min(
                max_entries - len(out), ledger.entries_in_ledger(position.ledger_id) - position.entry_id
            )
            next_acked = self._acks.next_acked_in_ledger(position)
            if next_acked is not None:
                run = min(run, next_acked - position.entry_id)
            try:
                got = ledger.read_entries(position, run, budget, at_least_one=not out, wait=wait)
            except OffloadedReadPending:
                if not out:
                    raise
                break
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

    def seek_exactly(self, position: Position) -> None:
        """Read from ``position`` next as it is, even where no entry is (Pulsar's forced seek): a
        readCompacted read goes on through the compacted view, whose positions may lie in ledgers
        trimmed since; the next read of the ledger itself starts at the first entry from there."""
        self._read_position = position

    def rewind(self) -> None:
        """Read again from just after the mark-delete position (Pulsar's ``rewind(readCompacted)``:
        below the first entry, from there as it is, for a compacted read to go on in the view)."""
        self._read_position = self._after_mark_delete()

    def reset(self, position: Position) -> None:
        """Pulsar's resetCursor: forget every ack and start over at ``position``."""
        ledger = self._ledger
        start = ledger.ceil_position(position)
        self._acks.clear()
        self._mark_delete = ledger.previous_position(start)
        self._read_position = start
        self._dirty = True

    def reset_exactly(self, position: Position) -> None:
        """``reset`` to ``position`` as it is, even before the first entry: a subscription placed in
        a compacted view whose ledgers were trimmed since (at its start, or by a seek into it).
        Its mark-delete position is just before ``position``."""
        self._acks.clear()
        self._mark_delete = min(
            Position(position.ledger_id, position.entry_id - 1), self._ledger.previous_position(position)
        )
        self._read_position = position
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
        ledger, acks = self._ledger, self._acks
        changed = added = False
        for position in positions:
            mark_delete = self._mark_delete
            if (
                acks.empty
                and position.entry_id == mark_delete.entry_id + 1
                and position.ledger_id == mark_delete.ledger_id
                and ledger.has_entry(position)
            ):
                # The entry right after the mark-delete position, with no other ack state: the
                # mark-delete position moves, as the general path would, without a page.
                self._mark_delete = position
                changed = True
                continue
            if position <= mark_delete or not (
                ledger.has_entry(position) or ledger.holds_compacted(position)
            ):
                continue
            added = acks.add(position) or added
        if added:
            self._advance_mark_delete()
        elif changed and self._read_position <= self._mark_delete:
            self._read_position = ledger.next_position(self._mark_delete)
        if changed or added:
            self._dirty = True

    def ack_batch_indexes(self, position: Position, unacked_words: list[int], batch_size: int) -> bool:
        """AND ``unacked_words`` (a Java BitSet's ``long[]``) into the entry's still-unacked set.

        Returns True once no message of the batch is left, and then the entry
        counts as individually deleted.
        """
        if self.is_acked(position):
            return True
        if not (self._ledger.has_entry(position) or self._ledger.holds_compacted(position)):
            return False
        all_acked, changed = self._acks.apply_batch(position, unacked_words, batch_size)
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

    def persist(self) -> int:
        """Write the changed pages and a marker to the cursor ledger and fsync; returns bytes written.

        Called by the managed ledger (``flush``, ``flush_cursors``).
        """
        if self._store is None:
            raise RuntimeError(f"cursor {self.name} has no cursor ledger")
        written = self._store.flush(self._mark_delete, self._acks)
        self._dirty = False
        self.persists += 1
        return written

    def recommit(self) -> None:
        """Record this cursor's cursor ledger in the metadata store again (``adopt_cursor``)."""
        if self._store is not None:
            self._store.recommit(self._mark_delete)

    def release(self, delete: bool = False) -> None:
        """Close the cursor ledger (delete its files too with ``delete``); called by the managed ledger."""
        store, self._store = self._store, None
        self._acks.detach()
        if store is not None:
            if delete:
                store.delete()
            else:
                store.close()

    # --------------------------------------------------------------- internals

    def _skip_acked(self, position: Position) -> Position:
        ledger = self._ledger
        position = ledger.ceil_position(position)
        if position <= self._mark_delete:
            position = ledger.next_position(self._mark_delete)
        while (end := self._acks.run_end(position)) != position.entry_id:
            position = ledger.next_position(Position(position.ledger_id, end - 1))
        return position

    def _after_mark_delete(self) -> Position:
        """Where reading goes on after the mark-delete position: the next entry, or, below the first
        entry (in ledgers trimmed since, where only a compacted view has messages), the position
        just after it as it is (a plain read steps to the first entry from there)."""
        mark_delete = self._mark_delete
        if mark_delete < self._ledger.before_first():
            return Position(mark_delete.ledger_id, mark_delete.entry_id + 1)
        return self._ledger.next_position(mark_delete)

    def _advance_mark_delete(self) -> None:
        """Move the mark-delete position over the acked run right after it, crossing ledgers;
        below the first entry, over the compacted view's acknowledged messages, then to just
        before the first entry once none is left there."""
        ledger = self._ledger
        below_first = False
        while self._mark_delete < (before_first := ledger.before_first()):
            kept = ledger.compacted_after(self._mark_delete)
            if kept is None:
                self._mark_delete = before_first
            elif kept in self._acks:
                self._mark_delete = kept
            else:
                below_first = True
                break
        while not below_first:
            following = ledger.next_position(self._mark_delete)
            end = self._acks.run_end(following)
            if end == following.entry_id:
                break
            self._mark_delete = Position(following.ledger_id, end - 1)
        self._acks.remove_up_to(self._mark_delete)
        if self._read_position <= self._mark_delete:
            self._read_position = self._after_mark_delete()

    def _drop_state_past(self, last: Position) -> None:
        """On recovery, forget acks of entries that did not survive (possible with fsync "never")."""
        if self._mark_delete > last:
            self._mark_delete = last
            self._dirty = True
        if self._acks.remove_up_to(self._mark_delete) | self._acks.remove_after(last):
            self._dirty = True
