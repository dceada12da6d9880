"""A cursor's individual acks after its mark-delete position: one page per ledger, bounded in memory.

Every ledger with ack state has a ``_Ref``: where its newest page was written
and its figures (acked entries, ranges, partial batches), which stay known
while the page itself is swapped out. Pages in memory are kept in least
recently used order; when their estimated size passes the memory limit the
least recently used ones are swapped out, whole, after writing them if they
changed. Any question or update about a swapped-out ledger swaps its page back
in. The page just used is never swapped out, so one ledger's page may exceed the
limit on its own (PIP 81 allows the same).

Without a pager (non-durable cursors) nothing is ever swapped out.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from magnetar.storage.ack_marker import PageEntry
from magnetar.storage.ack_page import AckPage
from magnetar.storage.batch_acks import to_unsigned
from magnetar.storage.errors import CorruptionError, StorageClosedError
from magnetar.storage.position import Position


class Pager(Protocol):
    def write_page(self, data: bytes) -> int:
        """Store a page; returns where it went (an entry id of the cursor ledger)."""
        ...

    def read_page(self, entry_id: int) -> bytes | memoryview: ...


@dataclass(slots=True)
class _Ref:
    entry_id: int = -1  # newest written version, -1 if never written
    size: int = 0  # bytes of that version
    acked: int = 0
    ranges: int = 0
    batches: int = 0
    first: int = 0  # span of entry ids with state, as of the written version:
    last: int = -1  # questions outside it about a swapped-out page need no swap-in
    memory: int = 0  # estimated bytes while in memory, 0 when swapped out
    page: AckPage | None = None
    dirty: bool = False  # changed since last written


class IndividualAcks:
    """Individually deleted entries and partial batch acks, by ledger, with LRU paging."""

    def __init__(self, pager: Pager | None = None, memory_limit: int | None = None):
        self._pager = pager
        self.memory_limit = memory_limit if pager is not None else None
        self._refs: dict[int, _Ref] = {}
        self._ids: list[int] = []  # the keys of _refs, sorted
        self._resident: OrderedDict[int, None] = OrderedDict()  # in memory, least recently used first
        self._acked = 0
        self._ranges = 0
        self._batches = 0
        self._memory = 0
        self.swap_ins = 0
        self.swap_outs = 0

    def __repr__(self) -> str:
        return (
            f"IndividualAcks(acked={self._acked}, ranges={self._ranges}, pages={len(self._refs)},"
            f" in_memory={len(self._resident)}, memory={self._memory})"
        )

    # ---------------------------------------------------------------- figures

    def __len__(self) -> int:
        """Individually deleted entries."""
        return self._acked

    @property
    def empty(self) -> bool:
        """No ledger has state: nothing is individually deleted and no batch is partly acked."""
        return not self._refs

    @property
    def range_count(self) -> int:
        """Ranges of individually deleted entries: the ack holes."""
        return self._ranges

    @property
    def partial_batches(self) -> int:
        return self._batches

    @property
    def page_count(self) -> int:
        return len(self._refs)

    @property
    def resident_count(self) -> int:
        return len(self._resident)

    @property
    def dirty_count(self) -> int:
        return sum(1 for lid in self._resident if self._refs[lid].dirty)

    @property
    def memory_bytes(self) -> int:
        return self._memory

    def ledger_ids(self) -> list[int]:
        return list(self._ids)

    def acked_before(self, ledger_id: int) -> int:
        """Individually deleted entries in the ledgers before ``ledger_id``."""
        return sum(self._refs[lid].acked for lid in self._ids[: bisect_left(self._ids, ledger_id)])

    # ---------------------------------------------------------------- queries

    def __contains__(self, position: Position) -> bool:
        page = self._page_covering(position)
        return page is not None and position.entry_id in page.ranges

    def run_end(self, position: Position) -> int:
        """End (exclusive entry id) of the acked run holding ``position``; its own id when not acked."""
        page = self._page_covering(position)
        return position.entry_id if page is None else page.ranges.run_end(position.entry_id)

    def next_acked_in_ledger(self, position: Position) -> int | None:
        """The first acked entry id at or after ``position`` within its ledger."""
        ref = self._refs.get(position.ledger_id)
        if ref is None or (ref.page is None and position.entry_id > ref.last):
            return None
        page = self._page(position.ledger_id)
        assert page is not None
        return page.ranges.next_at_or_after(position.entry_id)

    def batch(self, position: Position) -> list[int] | None:
        """Still-unacked words (unsigned) of a partly acknowledged batch entry."""
        page = self._page_covering(position)
        return None if page is None else page.batch(position.entry_id)

    def pages(self) -> Iterator[AckPage]:
        """Every page in ledger order; swapped-out ones are read for the caller and not kept."""
        for ledger_id in list(self._ids):
            ref = self._refs[ledger_id]
            yield ref.page if ref.page is not None else self._read(ledger_id, ref)

    # ---------------------------------------------------------------- updates

    def add(self, position: Position) -> bool:
        """Individually delete one entry (dropping its batch set); False if it already was."""
        page = self._page_to_change(position.ledger_id)
        had_batch = page.batch(position.entry_id) is not None
        added = page.add(position.entry_id)
        if added or had_batch:
            self._changed(position.ledger_id)
        return added

    def add_range(self, ledger_id: int, start: int, end: int) -> int:
        page = self._page_to_change(ledger_id)
        added = page.add_range(start, end)
        self._changed(ledger_id)
        return added

    def set_batch(self, position: Position, words: list[int]) -> None:
        self._page_to_change(position.ledger_id).set_batch(position.entry_id, to_unsigned(words))
        self._changed(position.ledger_id)

    def apply_batch(self, position: Position, unacked: list[int], batch_size: int) -> tuple[bool, bool]:
        """AND ``unacked`` into the entry's set; ``(all acked, changed)``. All acked drops the set."""
        page = self._page_to_change(position.ledger_id)
        all_acked, changed = page.apply_batch(position.entry_id, unacked, batch_size)
        self._changed(position.ledger_id, dirty=changed)
        return all_acked, changed

    def remove_up_to(self, position: Position) -> bool:
        """Forget everything <= ``position``; pages wholly behind it are dropped unread."""
        changed = False
        for ledger_id in self._ids[: bisect_left(self._ids, position.ledger_id)]:
            self._forget(ledger_id)
            changed = True
        ledger_id, entry_id = position.ledger_id, position.entry_id
        ref = self._refs.get(ledger_id)
        if ref is None or (ref.page is None and entry_id < ref.first):
            return changed
        if ref.page is None and entry_id >= ref.last:
            self._forget(ledger_id)
            return True
        page = self._page(ledger_id)
        assert page is not None
        removed = page.remove_up_to(entry_id)
        self._changed(ledger_id, dirty=removed)
        return changed or removed

    def remove_after(self, position: Position) -> bool:
        """Forget everything > ``position``; True if anything went."""
        changed = False
        for ledger_id in self._ids[bisect_right(self._ids, position.ledger_id) :]:
            self._forget(ledger_id)
            changed = True
        ledger_id, entry_id = position.ledger_id, position.entry_id
        ref = self._refs.get(ledger_id)
        if ref is None or (ref.page is None and entry_id >= ref.last):
            return changed
        if ref.page is None and entry_id < ref.first:
            self._forget(ledger_id)
            return True
        page = self._page(ledger_id)
        assert page is not None
        removed = page.remove_after(entry_id)
        self._changed(ledger_id, dirty=removed)
        return changed or removed

    def adopt(self, page: AckPage) -> None:
        """Take a whole ledger's state at once, replacing what it had (bulk imports, benchmarks)."""
        if page.ledger_id in self._refs:
            self._forget(page.ledger_id)
        if not page:
            return
        ref = self._add_ref(page.ledger_id, _Ref(page=page, dirty=True))
        self._resident[page.ledger_id] = None
        self._refresh(ref)
        self._enforce_limit()

    def clear(self) -> bool:
        changed = bool(self._refs)
        self._refs.clear()
        self._ids.clear()
        self._resident.clear()
        self._acked = self._ranges = self._batches = self._memory = 0
        return changed

    # ------------------------------------------------------------ persistence

    def load(self, pages: list[PageEntry]) -> None:
        """Start from a marker's page list: every page known, none in memory."""
        self.clear()
        for p in pages:
            ref = _Ref(p.entry_id, p.size, p.acked, p.ranges, p.batches, p.first, p.last)
            self._add_ref(p.ledger_id, ref)
            self._acked += p.acked
            self._ranges += p.ranges
            self._batches += p.batches

    def write_dirty_pages(self) -> int:
        """Write every changed page (they are all in memory); returns how many."""
        dirty = [lid for lid in self._resident if self._refs[lid].dirty]
        for ledger_id in dirty:
            self._write(self._refs[ledger_id])
        return len(dirty)

    def page_entries(self) -> list[PageEntry]:
        """What a marker records: every ledger's newest written page. Call after ``write_dirty_pages``."""
        out = []
        for ledger_id in self._ids:
            ref = self._refs[ledger_id]
            if ref.dirty or ref.entry_id < 0:
                raise RuntimeError(f"page of ledger {ledger_id} is not written")
            out.append(
                PageEntry(
                    ledger_id, ref.entry_id, ref.size, ref.acked, ref.ranges, ref.batches, ref.first, ref.last
                )
            )
        return out

    def relocate(self, moved: dict[int, int]) -> None:
        """Pages were copied to a new cursor ledger: ``ledger id -> new entry id``."""
        for ledger_id, entry_id in moved.items():
            self._refs[ledger_id].entry_id = entry_id

    def detach(self) -> None:
        """The pager is gone (cursor closed or deleted): keep what is in memory, swap nothing more."""
        self._pager = None
        self.memory_limit = None

    # -------------------------------------------------------------- internals

    def _page_covering(self, position: Position) -> AckPage | None:
        """The page of ``position``'s ledger, unless it is swapped out and ``position`` is outside it."""
        ref = self._refs.get(position.ledger_id)
        if ref is None:
            return None
        if ref.page is not None:
            self._resident.move_to_end(position.ledger_id)
            return ref.page
        if not ref.first <= position.entry_id <= ref.last:
            return None
        return self._page(position.ledger_id)

    def _page_to_change(self, ledger_id: int) -> AckPage:
        """The ledger's page, as ``_page``; a new, empty one if the ledger has none yet."""
        page = self._page(ledger_id)
        if page is not None:
            return page
        page = AckPage(ledger_id)
        ref = self._add_ref(ledger_id, _Ref(page=page, dirty=True))
        self._resident[ledger_id] = None
        self._refresh(ref)
        return page

    def _page(self, ledger_id: int) -> AckPage | None:
        """The ledger's page, swapped in if needed (and made most recently used)."""
        ref = self._refs.get(ledger_id)
        if ref is None:
            return None
        if ref.page is None:
            ref.page = self._read(ledger_id, ref)
            self._resident[ledger_id] = None
            self.swap_ins += 1
            self._refresh(ref)
            self._enforce_limit()
        else:
            self._resident.move_to_end(ledger_id)
        return ref.page

    def _read(self, ledger_id: int, ref: _Ref) -> AckPage:
        if self._pager is None:
            raise StorageClosedError(f"ledger {ledger_id}'s ack page is swapped out and the cursor closed")
        data = self._pager.read_page(ref.entry_id)
        try:
            page = AckPage.decode(data)
        except ValueError as exc:
            raise CorruptionError(f"ack page of ledger {ledger_id} at entry {ref.entry_id}: {exc}") from None
        if page.ledger_id != ledger_id:
            raise CorruptionError(
                f"entry {ref.entry_id} holds the page of ledger {page.ledger_id}, not {ledger_id}"
            )
        return page

    def _write(self, ref: _Ref) -> None:
        assert ref.page is not None and self._pager is not None
        data = ref.page.encode()
        ref.entry_id = self._pager.write_page(data)
        ref.size = len(data)
        ref.first, ref.last = ref.page.span()
        ref.dirty = False

    def _changed(self, ledger_id: int, dirty: bool = True) -> None:
        """A page was used (and perhaps changed): update the figures, drop it if empty, keep to the limit."""
        ref = self._refs[ledger_id]
        if not ref.page:
            self._forget(ledger_id)
            return
        if dirty:
            ref.dirty = True
            self._refresh(ref)
        self._enforce_limit()

    def _refresh(self, ref: _Ref) -> None:
        page = ref.page
        assert page is not None
        acked, ranges, batches = len(page.ranges), page.ranges.range_count, len(page.batches)
        memory = page.memory_bytes()
        self._acked += acked - ref.acked
        self._ranges += ranges - ref.ranges
        self._batches += batches - ref.batches
        self._memory += memory - ref.memory
        ref.acked, ref.ranges, ref.batches, ref.memory = acked, ranges, batches, memory

    def _add_ref(self, ledger_id: int, ref: _Ref) -> _Ref:
        self._refs[ledger_id] = ref
        insort(self._ids, ledger_id)
        return ref

    def _forget(self, ledger_id: int) -> None:
        ref = self._refs.pop(ledger_id)
        del self._ids[bisect_left(self._ids, ledger_id)]
        self._resident.pop(ledger_id, None)
        self._acked -= ref.acked
        self._ranges -= ref.ranges
        self._batches -= ref.batches
        self._memory -= ref.memory

    def _enforce_limit(self) -> None:
        """Swap out least recently used pages while over the limit; the most recent one always stays."""
        limit = self.memory_limit
        if limit is None:
            return
        while self._memory > limit and len(self._resident) > 1:
            ledger_id = next(iter(self._resident))
            ref = self._refs[ledger_id]
            if ref.dirty:
                self._write(ref)
            del self._resident[ledger_id]
            ref.page = None
            self._memory -= ref.memory
            ref.memory = 0
            self.swap_outs += 1
