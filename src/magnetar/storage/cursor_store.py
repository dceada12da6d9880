"""Where one durable cursor's acknowledgments are stored: flushes, recovery and rolling (PIP 81).

A flush appends the pages of the ledgers whose acks changed ("dirty"), then a
marker pointing at those new pages and at the unchanged ones from earlier
flushes, then fsyncs. The flush counts as done only after the fsync. The marker
is written twice, one copy after the other: should the newest entry be cut or
damaged later, recovery finds the same flush in the copy before it, instead of
going back to the flush before (whose acks since would come back). A copy costs
its few bytes and no fsync.

The cursor ledger grows by what each flush writes. Once it holds more than
twice its live data (the pages the newest marker points at, and that marker),
and at least ``min_roll_bytes``, it is *rolled*: the live pages are copied into
a new cursor ledger behind a fresh marker, that is fsynced, the metadata store
is switched to it in one commit, and the old one is deleted. Each roll copies no
more than was written since the previous one, so rolling at most doubles the
bytes written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.storage.ack_marker import Marker, PageEntry
from magnetar.storage.cursor_ledger import CursorLedger, record_bytes
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.storage.ack_state import IndividualAcks

log = logging.getLogger(__name__)

#: Copies of each marker a flush or roll writes (see the module docstring).
MARKER_COPIES = 2

AllocateId = Callable[[], int]
CommitLedger = Callable[[int, Position], None]  # (cursor ledger id, mark-delete) -> committed


class CursorStore:
    """A durable cursor's cursor ledger, and the ``Pager`` its ``IndividualAcks`` swap pages through.

    ``allocate_id`` hands out a new ledger id; ``commit`` durably records which
    cursor ledger is the cursor's (called after the first flush of a new store
    and after every roll).
    """

    def __init__(
        self,
        directory: Path,
        ledger: CursorLedger,
        *,
        memory_limit: int,
        min_roll_bytes: int,
        allocate_id: AllocateId,
        commit: CommitLedger,
        recovered: tuple[int, Marker] | None = None,
        committed: bool = True,
        owner: str | None = None,
    ):
        """Use ``create`` or ``open``."""
        self._dir = directory
        self._ledger = ledger
        self.memory_limit = memory_limit
        self._min_roll_bytes = min_roll_bytes
        self._allocate_id = allocate_id
        self._commit = commit
        self._committed = committed
        self._owner = owner  # the cursor's name, written next to each new cursor ledger
        self.recovered = recovered[1] if recovered is not None else None
        #: What opening found damaged in the cursor ledger.
        self.damage = list(ledger.damage)
        self._last_marker = recovered[0] if recovered is not None else -1
        self._closed = False
        # figures
        self.flushes = 0
        self.fsyncs = 0
        self.rolls = 0
        self.bytes_written = 0
        self.last_flush_bytes = 0
        self.last_flush_pages = 0
        self.live_bytes = 0  # what the newest marker and its pages take
        self._pending_bytes = 0  # pages written since the last marker (flushes and evictions)
        self._pending_pages = 0

    def __repr__(self) -> str:
        return f"CursorStore({self._ledger!r}, last_marker={self._last_marker})"

    @classmethod
    def create(
        cls,
        directory: Path,
        allocate_id: AllocateId,
        commit: CommitLedger,
        owner: str | None = None,
        *,
        memory_limit: int,
        min_roll_bytes: int,
    ) -> CursorStore:
        """A store on a new, empty cursor ledger; ``commit`` runs after its first flush."""
        ledger = CursorLedger.create(directory, allocate_id(), owner)
        return cls(
            directory,
            ledger,
            memory_limit=memory_limit,
            min_roll_bytes=min_roll_bytes,
            allocate_id=allocate_id,
            commit=commit,
            committed=False,
            owner=owner,
        )

    @classmethod
    def open(
        cls,
        directory: Path,
        ledger_id: int,
        allocate_id: AllocateId,
        commit: CommitLedger,
        owner: str | None = None,
        *,
        memory_limit: int,
        min_roll_bytes: int,
    ) -> CursorStore:
        """Reopen a cursor ledger and find its newest valid marker (``recovered``, None if there is none)."""
        ledger = CursorLedger.open(directory, ledger_id)
        found = ledger.last_valid_marker()
        if found is not None and found[0] != ledger.entries - 1:
            log.warning(
                "cursor ledger %d: recovered from the marker at entry %d of %d (a flush did not finish)",
                ledger_id,
                found[0],
                ledger.entries,
            )
        return cls(
            directory,
            ledger,
            memory_limit=memory_limit,
            min_roll_bytes=min_roll_bytes,
            allocate_id=allocate_id,
            commit=commit,
            recovered=found,
            owner=owner,
        )

    @property
    def ledger_id(self) -> int:
        return self._ledger.ledger_id

    # ------------------------------------------------------------------ pager

    def write_page(self, data: bytes) -> int:
        entry_id = self._ledger.append(data)
        self._pending_bytes += record_bytes(len(data))
        self._pending_pages += 1
        return entry_id

    def read_page(self, entry_id: int) -> memoryview:
        return self._ledger.read(entry_id)

    # ------------------------------------------------------------------ flush

    def flush(self, mark_delete: Position, acks: IndividualAcks) -> int:
        """Write the dirty pages and a marker twice (``_append_marker``), fsync; returns the bytes
        this flush wrote."""
        acks.write_dirty_pages()
        pages = acks.page_entries()
        marker = Marker(mark_delete, self._last_marker, pages).encode()
        entry_id = _append_marker(self._ledger, marker)
        self.fsyncs += self._ledger.sync()
        self._last_marker = entry_id
        written = self._pending_bytes + MARKER_COPIES * record_bytes(len(marker))
        self.flushes += 1
        self.bytes_written += written
        self.last_flush_bytes = written
        self.last_flush_pages = self._pending_pages
        self._pending_bytes = self._pending_pages = 0
        if not self._committed:
            self._commit(self._ledger.ledger_id, mark_delete)
            self._committed = True
        self.live_bytes = page_entry_bytes(pages) + MARKER_COPIES * record_bytes(len(marker))
        if self._ledger.size_bytes > max(self._min_roll_bytes, 2 * self.live_bytes):
            self.roll(mark_delete, acks)
        return written

    def roll(self, mark_delete: Position, acks: IndividualAcks) -> None:
        """Copy the live pages and a new marker into a new cursor ledger and switch to it.

        Call right after a flush (every page written, none dirty). A crash
        before the switch is committed leaves the old cursor ledger in force
        and the new one an orphan, deleted on the next open.
        """
        pages = acks.page_entries()
        new = CursorLedger.create(self._dir, self._allocate_id(), self._owner)
        try:
            moved = [replace(p, entry_id=new.append(self._ledger.read(p.entry_id))) for p in pages]
            marker_entry = _append_marker(new, Marker(mark_delete, -1, moved).encode())
            self.fsyncs += new.sync()
            self._commit(new.ledger_id, mark_delete)
        except BaseException:
            new.delete()
            raise
        acks.relocate({p.ledger_id: p.entry_id for p in moved})
        old, self._ledger = self._ledger, new
        self._last_marker = marker_entry
        self.rolls += 1
        old.delete()
        log.debug("rolled cursor ledger %d to %d (%d pages)", old.ledger_id, new.ledger_id, len(moved))

    def recommit(self, mark_delete: Position) -> None:
        """Commit (again) that this store's cursor ledger is the cursor's."""
        self._commit(self._ledger.ledger_id, mark_delete)
        self._committed = True

    # -------------------------------------------------------------- lifecycle

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._ledger.close()

    def delete(self) -> None:
        self._closed = True
        self._ledger.delete()

    def stats(self) -> dict[str, int]:
        return {
            "cursor_ledger_id": self._ledger.ledger_id,
            "cursor_ledger_entries": self._ledger.entries,
            "cursor_ledger_bytes": self._ledger.size_bytes,
            "cursor_ledger_live_bytes": self.live_bytes,
            "cursor_ledger_rolls": self.rolls,
            "flushes": self.flushes,
            "last_flush_bytes": self.last_flush_bytes,
            "last_flush_pages": self.last_flush_pages,
            "bytes_written": self.bytes_written,
        }


def page_entry_bytes(pages: list[PageEntry]) -> int:
    """Bytes the pages take in the cursor ledger."""
    return sum(record_bytes(p.size) for p in pages)


def _append_marker(ledger: CursorLedger, marker: bytes) -> int:
    """Append ``MARKER_COPIES`` copies of ``marker``; the entry id of the last."""
    entry_id = -1
    for _ in range(MARKER_COPIES):
        entry_id = ledger.append(marker)
    return entry_id
