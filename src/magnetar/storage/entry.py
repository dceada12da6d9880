"""One stored entry: the exact bytes a producer's add gave, and where they are."""

from __future__ import annotations

from typing import NamedTuple

from magnetar.storage.position import Position


class Entry(NamedTuple):
    """Storage never re-serializes: ``data`` is byte-for-byte what ``add_entry`` was given."""

    position: Position
    data: bytes
