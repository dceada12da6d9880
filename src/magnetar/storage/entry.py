"""One stored entry: the exact bytes a producer's add gave, and where they are."""

from __future__ import annotations

from typing import NamedTuple

from magnetar.storage.position import Position

#: An entry's bytes: ``bytes``, or a read-only memoryview over memory nobody writes to again
#: (the broker stores a large message from the buffer the socket was read into).
EntryData = bytes | memoryview


class Entry(NamedTuple):
    """Storage never re-serializes: ``data`` is byte-for-byte what ``add_entry`` was given."""

    position: Position
    data: EntryData
