"""Reading a managed ledger's entries: from the entry cache while it has them, else with one
pread per ledger span; a span that fails its checks is salvaged (its intact entries kept, its
damaged ones passed over and reported). A closed ledger whose log file is gone is passed over
whole, as Pulsar skips a ledger it cannot read: its entries are reported damaged, once. An
offloaded ledger is read the same way from its object (``offloaded_segment.py``); while the bytes
are being fetched a read returns what it read before them, or raises ``OffloadedReadPending``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from magnetar.storage.damage import Damage
from magnetar.storage.entry import Entry
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.errors import CorruptionError, MissingLedgerError, OffloadedReadPending
from magnetar.storage.ledger_list import LedgerList
from magnetar.storage.position import Position

log = logging.getLogger(__name__)


class ReadableLedger(Protocol):
    """A ledger's data as reads see it: a local ``Segment`` or an ``OffloadedSegment``."""

    @property
    def ledger_id(self) -> int: ...

    def read_range(
        self, first: int, count: int, max_bytes: int | None = None, at_least_one: bool = True
    ) -> list[memoryview]: ...

    def read_salvaging(
        self, first: int, count: int, max_bytes: int | None = None, at_least_one: bool = True
    ) -> list[memoryview | None]: ...

    def record_span(self, entry_id: int) -> tuple[int, int]: ...


class LedgerReader:
    """Reads for one managed ledger (which holds its lock around each call)."""

    def __init__(
        self,
        ml_id: int,
        cache: EntryCache,
        segment_for: Callable[[int], ReadableLedger],
        on_damaged: Callable[[list[Damage]], None],
    ) -> None:
        self._id = ml_id
        self._cache = cache
        self._segment_for = segment_for
        #: Told of the damaged entries a read passed over (to report them and skip them for good).
        self._on_damaged = on_damaged
        #: Ledgers found without their log file (said once each).
        #: (A dict as a set: an empty dict costs a quarter of an empty set, per managed ledger.)
        self._missing: dict[int, None] = {}

    def read(
        self,
        ledgers: LedgerList,
        start: Position,
        last: Position,
        max_entries: int,
        max_bytes: int | None,
        at_least_one: bool,
        partial: bool = True,
    ) -> list[Entry]:
        """What ``ManagedLedger.read_entries`` returns, reading no further than ``last``. Offloaded
        bytes being fetched end the read with what it read before them (``partial``), or raise
        ``OffloadedReadPending`` (a caller that waits and reads again)."""
        out: list[Entry] = []
        budget = max_bytes
        position = ledgers.ceil(start)
        while len(out) < max_entries and position <= last:
            if position.ledger_id == last.ledger_id:
                ledger_end = last.entry_id + 1
            else:
                ledger_end = ledgers.count(position.ledger_id)
            run = min(max_entries - len(out), ledger_end - position.entry_id)
            try:
                got, passed = self.read_span(position, run, budget, at_least_one and not out)
            except OffloadedReadPending:
                if out and partial:  # what was read before the offloaded bytes being fetched
                    break
                raise
            out.extend(got)
            if budget is not None:
                budget -= sum(len(entry.data) for entry in got)
            if passed < run:
                break
            position = ledgers.ceil(Position(position.ledger_id, position.entry_id + passed))
        return out

    def read_span(
        self, start: Position, count: int, budget: int | None, at_least_one: bool
    ) -> tuple[list[Entry], int]:
        """Up to ``count`` entries of one ledger: from the cache while it has them, then one pread.

        Returns the entries and how many positions they cover from ``start`` (damaged ones
        are passed over, not returned).
        """
        ledger_id, first = start.ledger_id, start.entry_id
        out: list[Entry] = []
        while len(out) < count:
            position = Position(ledger_id, first + len(out))
            data = self._cache.get(self._id, position)
            if data is None:
                break
            if budget is not None and len(data) > budget and (out or not at_least_one):
                return out, len(out)
            out.append(Entry(position, data))
            if budget is not None:
                budget -= len(data)
        passed = len(out)
        if passed < count:
            begin = first + passed
            try:
                segment = self._segment_for(ledger_id)
            except MissingLedgerError as exc:
                self._pass_over_missing(exc, begin, count - passed)
                return out, count
            try:
                datas = segment.read_range(begin, count - passed, budget, at_least_one and not out)
            except CorruptionError:
                return self._read_salvaging(segment, begin, count - passed, budget, at_least_one, out)
            out.extend(Entry(Position(ledger_id, begin + i), data) for i, data in enumerate(datas))
            passed += len(datas)
        return out, passed

    def _pass_over_missing(self, missing: MissingLedgerError, begin: int, count: int) -> None:
        """Report entries of a ledger without its log file as damaged (every cursor then skips
        them), and say so once: the first time from ``begin`` to the ledger's end (one log line
        for them all), later the ``count`` entries read from ``begin`` (each report costs its
        entries)."""
        if missing.ledger_id not in self._missing:
            self._missing[missing.ledger_id] = None
            log.error("%s; its %d entries are skipped", missing, missing.entries)
            end = missing.entries
        else:
            end = min(begin + count, missing.entries)
        self._on_damaged([Damage(missing.ledger_id, entry_id, 0, 0) for entry_id in range(begin, end)])

    def _read_salvaging(
        self,
        segment: ReadableLedger,
        begin: int,
        count: int,
        budget: int | None,
        at_least_one: bool,
        out: list[Entry],
    ) -> tuple[list[Entry], int]:
        """The span from ``begin`` failed its checks: keep its intact entries, pass over the damaged
        ones. ``out`` holds the entries before ``begin`` (from the cache); returns what
        ``read_span`` does."""
        ledger_id = segment.ledger_id
        passed = len(out)  # the cached entries before ``begin``
        damaged = []
        for i, data in enumerate(segment.read_salvaging(begin, count, budget, at_least_one and not out)):
            if data is None:
                damaged.append(Damage(ledger_id, begin + i, *segment.record_span(begin + i)))
            elif budget is not None and len(data) > budget and out:
                break
            else:
                out.append(Entry(Position(ledger_id, begin + i), data))
                if budget is not None:
                    budget -= len(data)
            passed += 1
        self._on_damaged(damaged)
        return out, passed
