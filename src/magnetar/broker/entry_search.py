"""Binary search over a topic's stored entries, counting the entries it reads.

The readable entries of a managed ledger (every ledger, the current one up to the last
durable entry) are numbered 0..n-1 across ledgers from the ledger list alone, without
reading anything; a search then reads O(log n) entries. Seek by time, TTL and the index
look-ups search this way.

An ``EntryReader`` is any callable from a position to the stored bytes; ``CountingReader``
reads from the managed ledger and counts, so tests and the benchmark can check how many
entries a search read.

A damaged entry (``EntryNotFoundError``: reads pass over it, and every subscription takes it
as acknowledged) is passed over by a search too: it takes the answer of the next readable
entry, so a search whose midpoint is damaged still answers, and never with a damaged entry.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata
from magnetar.storage.entry import EntryData
from magnetar.storage.errors import EntryNotFoundError
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position

EntryReader = Callable[[Position], EntryData]


class CountingReader:
    """Reads entries of a managed ledger and counts the reads."""

    def __init__(self, ml: ManagedLedger) -> None:
        self.ml = ml
        self.reads = 0

    def __call__(self, position: Position) -> EntryData:
        self.reads += 1
        return self.ml.read_entry(position).data


def reader_for(ml: ManagedLedger, read: EntryReader | None) -> EntryReader:
    return read if read is not None else CountingReader(ml)


class EntrySpace:
    """The readable entries of a managed ledger as one sequence of ordinals 0..size-1."""

    def __init__(self, ml: ManagedLedger) -> None:
        last = ml.last_confirmed
        self.ledger_ids: list[int] = []
        self.starts: list[int] = []  # ordinal of each ledger's entry 0
        self.counts: list[int] = []
        total = 0
        for info in ml.ledgers():
            count = info.entries
            if info.ledger_id == last.ledger_id:
                count = last.entry_id + 1
            elif info.ledger_id > last.ledger_id:
                count = 0  # a ledger after the last durable entry: nothing readable yet
            if count > 0:
                self.ledger_ids.append(info.ledger_id)
                self.starts.append(total)
                self.counts.append(count)
                total += count
        self.size = total

    def position(self, ordinal: int) -> Position:
        i = bisect_right(self.starts, ordinal) - 1
        return Position(self.ledger_ids[i], ordinal - self.starts[i])

    def ordinal(self, position: Position) -> int | None:
        """The ordinal of a readable entry, None when ``position`` holds none."""
        i = bisect_right(self.ledger_ids, position.ledger_id) - 1
        if i < 0 or self.ledger_ids[i] != position.ledger_id:
            return None
        if not 0 <= position.entry_id < self.counts[i]:
            return None
        return self.starts[i] + position.entry_id


def first_true(count: int, predicate: Callable[[int], bool]) -> int:
    """Smallest i in [0, count) with predicate(i), else count; the predicate must be monotonic."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def read_or_none(read: EntryReader, position: Position) -> EntryData | None:
    """The entry at ``position``, None when it is damaged (or trimmed meanwhile)."""
    try:
        return read(position)
    except EntryNotFoundError:
        return None


def first_readable(space: EntrySpace, read: EntryReader, holds: Callable[[EntryData], bool]) -> int:
    """Ordinal of the first readable entry whose data ``holds`` (monotonic over the readable
    entries), else ``space.size``: ``first_true`` where an unreadable entry takes the answer of
    the next readable one. O(log n) reads, plus the run of damaged entries a probe lands in."""
    seen: dict[int, tuple[int, bool]] = {}

    def next_readable(ordinal: int, stop: int) -> tuple[int, bool]:
        """The first readable ordinal in [ordinal, stop) and its answer; (stop, True) if none."""
        while ordinal < stop:
            if ordinal not in seen:
                data = read_or_none(read, space.position(ordinal))
                seen[ordinal] = (ordinal, holds(data)) if data is not None else (-1, False)
            found, answer = seen[ordinal]
            if found >= 0:
                return found, answer
            ordinal += 1
        return stop, True

    lo, hi = 0, space.size
    while lo < hi:
        mid = (lo + hi) // 2
        found, answer = next_readable(mid, hi)
        if answer:
            hi = mid
        else:
            lo = found + 1
    return next_readable(lo, space.size)[0]


# -- what an entry says about itself, without touching its payload ------------------------------


def entry_time(data: EntryData) -> int:
    """Broker timestamp when the entry has one, else the producer's publish time (0 if unreadable)."""
    try:
        meta, producer_bytes = split_entry_metadata(data)
        if meta is not None and meta.HasField("broker_timestamp"):
            return meta.broker_timestamp
        metadata, _ = parse_metadata(producer_bytes)
        return metadata.publish_time
    except ProtocolError:
        return 0


def entry_broker_metadata(data: EntryData) -> wire.BrokerEntryMetadata | None:
    try:
        meta, _ = split_entry_metadata(data)
    except ProtocolError:
        return None
    return meta


def entry_index(data: EntryData) -> int | None:
    """The index of the entry's last message, None when stored without one."""
    meta = entry_broker_metadata(data)
    return meta.index if meta is not None and meta.HasField("index") else None


def message_count(metadata: wire.MessageMetadata) -> int:
    """Messages in an entry: a batch's size, else 1 (a chunk counts as one)."""
    if metadata.HasField("num_messages_in_batch"):
        return max(metadata.num_messages_in_batch, 1)
    return 1
