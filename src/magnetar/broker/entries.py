"""What dispatchers need to know about a stored entry, read without copying its payload."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata
from magnetar.storage.entry import Entry, EntryData
from magnetar.storage.position import Position


@dataclass(slots=True)
class DispatchEntry:
    """A stored entry as the dispatcher sees it: the position, the producer's bytes, and message count."""

    position: Position
    data: EntryData
    #: Offset in ``data`` where the producer's bytes start (after broker entry metadata).
    producer_offset: int
    num_messages: int
    metadata: wire.MessageMetadata | None

    @classmethod
    def of(cls, entry: Entry) -> DispatchEntry:
        data = entry.data
        try:
            _, producer_view = split_entry_metadata(data)
            offset = len(data) - len(producer_view)
            metadata, _ = parse_metadata(producer_view)
        except ProtocolError:
            # Stored bytes we cannot read are still delivered: the client judges them.
            return cls(entry.position, data, 0, 1, None)
        return cls(entry.position, data, offset, _count(metadata), metadata)

    @property
    def is_batch(self) -> bool:
        return self.metadata is not None and self.metadata.HasField("num_messages_in_batch")

    def payload_for(self, with_entry_metadata: bool) -> memoryview:
        view = memoryview(self.data)
        return view if with_entry_metadata else view[self.producer_offset :]


def _count(metadata: wire.MessageMetadata) -> int:
    return max(metadata.num_messages_in_batch, 1) if metadata.HasField("num_messages_in_batch") else 1


class RecentEntries:
    """What the topic learnt about the entries it stored last, for dispatch at the tail.

    A subscription keeping up reads entries right after they were published; the
    topic parsed their metadata then, so dispatch takes the facts from here instead
    of splitting and parsing the stored bytes again. Older entries (catch-up reads,
    replays, after a restart) are parsed as before.
    """

    def __init__(self, capacity: int = 1024) -> None:
        self._capacity = capacity
        #: Made at the first entry remembered, dropped by ``clear``: an empty OrderedDict costs
        #: 128 bytes, for each of 100,000 topics mostly idle (issue 40).
        self._facts: OrderedDict[Position, tuple[int, wire.MessageMetadata]] | None = None

    def remember(self, position: Position, producer_offset: int, metadata: wire.MessageMetadata) -> None:
        """``metadata`` is shared with every dispatch of the entry: it must not change afterwards."""
        facts = self._facts
        if facts is None:
            facts = self._facts = OrderedDict()
        facts[position] = (producer_offset, metadata)
        if len(facts) > self._capacity:
            facts.popitem(last=False)  # O(1); a dict's first key is found past every deleted slot

    def __len__(self) -> int:
        return len(self._facts) if self._facts is not None else 0

    def clear(self) -> None:
        """Forget every entry's facts (and the table that held them)."""
        self._facts = None

    def entry(self, entry: Entry) -> DispatchEntry:
        known = self._facts.get(entry.position) if self._facts is not None else None
        if known is None:
            return DispatchEntry.of(entry)
        offset, metadata = known
        return DispatchEntry(entry.position, entry.data, offset, _count(metadata), metadata)
