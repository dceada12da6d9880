"""The marker entry of a cursor ledger: which page holds each ledger's acks, and the mark-delete position.

Every flush ends with a marker. It lists every data ledger that has ack state,
pointing at the entry of the cursor ledger with its newest page, so pages that
did not change are reused from earlier flushes (PIP 81). Recovery trusts the
newest marker that is intact and whose pages are intact.

Stored form::

    b"MgM1"  [u32 crc32c of what follows, big-endian]  [u8 codec][body]
    body:  zigzag varints: mark-delete ledger, mark-delete entry,
           previous marker's entry id in this cursor ledger (-1: none)
           varint n_pages, then columns of n_pages numbers:
               ledger id delta (the first from 0), page entry id,
               page size in bytes, acked entries, ranges, partial batches,
               first and last entry id with state in the page

The crc covers the compressed body, so a marker is checked on its own as well
as by the record checksum around it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import accumulate, chain
from operator import sub

import crc32c

from magnetar.storage.ack_codec import (
    compress,
    decompress,
    get_column,
    get_varint,
    put_column,
    put_varint,
    unzigzag,
    zigzag,
)
from magnetar.storage.position import Position

MARKER_TAG = b"MgM1"
_COLUMNS = ("entry_id", "size", "acked", "ranges", "batches", "first", "last")
_HEADER = len(MARKER_TAG) + 4


def is_marker(data: bytes | memoryview) -> bool:
    return data[: len(MARKER_TAG)] == MARKER_TAG


@dataclass(frozen=True, slots=True)
class PageEntry:
    """Where one data ledger's page is, and the figures needed while it is swapped out."""

    ledger_id: int
    entry_id: int  # of the page in the cursor ledger
    size: int  # bytes of the page entry's data
    acked: int  # individually deleted entries
    ranges: int  # of acked entries
    batches: int  # partly acknowledged batch entries
    first: int  # first and last entry id with state: questions outside them need no swap-in
    last: int


@dataclass(frozen=True, slots=True)
class Marker:
    mark_delete: Position
    previous: int = -1  # entry id of the marker before this one in the same cursor ledger
    pages: list[PageEntry] = field(default_factory=list)  # by ledger id

    def encode(self) -> bytes:
        body = bytearray()
        for value in (self.mark_delete.ledger_id, self.mark_delete.entry_id, self.previous):
            put_varint(body, zigzag(value))
        pages = self.pages
        put_varint(body, len(pages))
        if pages:
            ledger_ids = [p.ledger_id for p in pages]
            put_column(body, array("q", map(sub, ledger_ids, chain((0,), ledger_ids))))
            for name in _COLUMNS:
                put_column(body, array("q", (getattr(p, name) for p in pages)))
        payload = compress(body)
        return MARKER_TAG + crc32c.crc32c(payload).to_bytes(4, "big") + payload

    @classmethod
    def decode(cls, data: bytes | memoryview) -> Marker:
        """Parse a marker; raises ValueError when it is torn, corrupt or not a marker."""
        if not is_marker(data) or len(data) < _HEADER:
            raise ValueError("not a marker entry")
        payload = memoryview(data)[_HEADER:]
        if crc32c.crc32c(payload) != int.from_bytes(data[len(MARKER_TAG) : _HEADER], "big"):
            raise ValueError("marker checksum mismatch")
        body = decompress(payload)
        md_ledger, pos = get_varint(body, 0)
        md_entry, pos = get_varint(body, pos)
        previous, pos = get_varint(body, pos)
        count, pos = get_varint(body, pos)
        pages: list[PageEntry] = []
        if count:
            deltas, pos = get_column(body, pos, count)
            if 0 in deltas[1:]:
                raise ValueError("marker lists a ledger twice")
            columns: list[Iterable[int]] = [accumulate(deltas)]
            for _ in _COLUMNS:
                column, pos = get_column(body, pos, count)
                columns.append(column)
            pages = [PageEntry(*row) for row in zip(*columns, strict=True)]
        if pos != len(body):
            raise ValueError("trailing bytes after the marker")
        return cls(Position(unzigzag(md_ledger), unzigzag(md_entry)), unzigzag(previous), pages)
