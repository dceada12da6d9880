"""Pulsar's two-phase compactor, the part that runs on a worker thread (``compacted_topic.py`` commits).

Phase one reads the input (the previous compacted ledger, then the topic after the previous horizon
up to the new one: the last confirmed entry when compaction started) and chooses the latest message
of each key (``compaction_selection.py``). Phase two reads the same input again and writes what was
chosen to a new compacted ledger (``storage/compacted_ledger.py``), a batch kept in part rewritten
(``protocol/compaction.py``), and fsyncs it. Nothing is switched here: until the caller records the
new ledger, readers and a crash see the previous compacted view.

The compactor shares the broker's GIL with the event loop. Left alone it keeps it for Python's
switch interval (5 ms) each time the loop asks, and a send waits that long at each of its turns on
the loop and the fsync thread: p50 15-18 ms while it runs, against 1-2 ms. So every 0.2 ms of its
work it lets go of the GIL and the CPU (``os.sched_yield``), and a thread waiting for the GIL takes
it at once: p50 5-7 ms on the shared 2-core VM, about what a process of its own burning a core
leaves there (docs/benchmarks.md, Compaction); the compaction takes longer only where every core
is busy.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from magnetar.broker.compaction_pause import CompactionCheckpoints
from magnetar.broker.compaction_selection import Selection, select
from magnetar.broker.compaction_stats import CompactionRecord
from magnetar.protocol import ProtocolError
from magnetar.protocol.compaction import EntryFacts, entry_facts, rebatch
from magnetar.storage.compacted_ledger import CompactedLedger, CompactedLedgerWriter
from magnetar.storage.entry import Entry
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position

log = logging.getLogger(__name__)

_READ_ENTRIES = 512
_READ_BYTES = 8 * 1024 * 1024
#: Seconds of work between two yields of the GIL by default (the module's docstring says why;
#: the broker's ``compaction_yield_interval_ms``).
YIELD_EVERY_S = 0.0002
_yield = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))


@dataclass(frozen=True, slots=True)
class CompactedView:
    """A compacted ledger and its horizon: the view up to the horizon is the ledger's entries."""

    ledger: CompactedLedger
    horizon: Position


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    """A finished phase two: the new compacted ledger (durable, not yet recorded) and its horizon,
    with what Pulsar's compaction stats count."""

    ledger_id: int
    entries: int
    horizon: Position
    messages_read: int
    messages_kept: int
    bytes_written: int
    duration_s: float

    @property
    def removed(self) -> int:
        return self.messages_read - self.messages_kept


def compact(
    ml: ManagedLedger,
    previous: CompactedView | None,
    record: CompactionRecord | None = None,
    checkpoints: CompactionCheckpoints | None = None,
    yield_every_s: float = YIELD_EVERY_S,
) -> CompactionOutcome | None:
    """Both phases up to the entry last confirmed now; None when there is nothing new to compact.
    ``record`` counts the bytes read and written; ``checkpoints`` stops the run when the broker
    stops (CompactionStopped, the new ledger deleted) and holds it at a test's step;
    ``yield_every_s``: seconds of work between two yields of the GIL (0: never)."""
    started = time.monotonic()
    run = _Run(
        ml,
        previous,
        record or CompactionRecord(),
        checkpoints or CompactionCheckpoints(ml.name),
        yield_every_s,
    )
    end = ml.next_position(ml.last_confirmed)
    after = previous.horizon if previous is not None else None
    if after is not None and ml.last_confirmed <= after:
        return None
    selection = select(run.facts(end), end)
    while selection.stop_before is not None:
        end = selection.stop_before
        selection = select(run.facts(end), end)
    horizon = selection.horizon
    if after is not None and (horizon is None or horizon < after):
        horizon = after
    if horizon is None or (after is not None and horizon <= after):
        return None
    writer = CompactedLedgerWriter(ml.directory, ml.allocate_ledger_id())
    try:
        run.write(writer, end, selection)
        writer.finish()
        run.record.bytes_written += writer.bytes_written
        run.checkpoints.check("before_switch")
    except BaseException:
        writer.abort()
        raise
    return CompactionOutcome(
        writer.ledger_id,
        writer.entries,
        horizon,
        selection.messages,
        selection.kept_messages,
        writer.bytes_written,
        time.monotonic() - started,
    )


class _Run:
    """One compaction's reads and writes, counted in its record and checked in at its steps."""

    def __init__(
        self,
        ml: ManagedLedger,
        previous: CompactedView | None,
        record: CompactionRecord,
        checkpoints: CompactionCheckpoints,
        yield_every_s: float,
    ) -> None:
        self.ml = ml
        self.previous = previous
        self.record = record
        self.checkpoints = checkpoints
        self.yield_every_s = yield_every_s
        self._yielded = time.perf_counter()

    def breathe(self) -> None:
        """Let a thread waiting for the GIL (the event loop's, the fsync thread's) have it, every
        ``yield_every_s`` of work."""
        if not self.yield_every_s:
            return
        now = time.perf_counter()
        if now - self._yielded >= self.yield_every_s:
            _yield()
            self._yielded = time.perf_counter()

    def input(self, end: Position) -> Iterator[Entry]:
        """The previous compacted ledger's entries, then the topic's after its horizon, before ``end``."""
        ml, previous, check = self.ml, self.previous, self.checkpoints.check
        if previous is not None:
            for entry in previous.ledger.all_entries():
                self.record.bytes_read += len(entry.data)
                self.breathe()
                yield entry
            start = ml.next_position(previous.horizon)
        else:
            start = ml.ceil_position(Position.EARLIEST)
        while start < end:
            check()
            entries = ml.read_entries(start, _READ_ENTRIES, _READ_BYTES)
            if not entries:
                return
            for entry in entries:
                if entry.position >= end:
                    return
                self.record.bytes_read += len(entry.data)
                self.breathe()
                yield entry
            start = ml.next_position(entries[-1].position)

    def facts(self, end: Position) -> Iterator[tuple[Position, EntryFacts]]:
        """Phase one's input: what each entry says of its keys (an unreadable one is left out)."""
        first = True
        for entry in self.input(end):
            try:
                yield entry.position, entry_facts(entry.data)
            except ProtocolError as exc:  # unreadable: kept out of the view (it has no key anyone could read)
                log.warning("compaction: entry %s is unreadable, kept out: %s", entry.position, exc)
            if first:
                first = False
                self.checkpoints.check("phase_one")

    def write(self, writer: CompactedLedgerWriter, end: Position, selection: Selection) -> None:
        """Phase two: what phase one chose, to the new compacted ledger."""
        first = True
        for entry in self.input(end):
            whole = selection.keeps_whole(entry.position)
            if whole is None:
                continue
            if whole:
                writer.add(entry.position, entry.data)
            else:
                indexes = selection.kept[entry.position][0]
                assert indexes is not None  # keeps_whole said the batch is kept in part
                writer.add(entry.position, rebatch(entry.data, indexes))
            if first:
                first = False
                self.checkpoints.check("phase_two")
