"""What dispatchers need to know about a stored entry, read without copying its payload."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata
from magnetar.storage.entry import Entry
from magnetar.storage.position import Position


@dataclass(slots=True)
class DispatchEntry:
    """A stored entry as the dispatcher sees it: the position, the producer's bytes, and message count."""

    position: Position
    data: bytes
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
            count = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
        except ProtocolError:
            # Stored bytes we cannot read are still delivered: the client judges them.
            offset, metadata, count = 0, None, 1
        return cls(entry.position, data, offset, max(count, 1), metadata)

    @property
    def is_batch(self) -> bool:
        return self.metadata is not None and self.metadata.HasField("num_messages_in_batch")

    def payload_for(self, with_entry_metadata: bool) -> memoryview:
        view = memoryview(self.data)
        return view if with_entry_metadata else view[self.producer_offset :]
