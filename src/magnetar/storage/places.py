"""Named places on a cursor: many small acknowledged positions kept under one cursor, written together.

A cursor (a subscription) may carry many *places*, each a name with a mark-delete position,
the entries acknowledged past it and the batches acknowledged in part: the broker keeps one per
consumer of a broadcast subscription, so that a consumer coming back after a restart resumes at
its own place. Storage knows nothing of consumers: it keeps ``(managed ledger, cursor, name) ->
Place``.

Writes are batched: callers ``put`` and ``remove`` places in memory as often as they like, and
``ManagedLedger.flush_cursors`` writes every change of every place book of the managed ledger in
one SQLite transaction (one commit, one WAL fsync), however many places changed. 100K places
that move between two flushes cost one write of 100K small rows, not 100K writes. What was
changed after the last flush is lost by a crash: the places come back as of that flush.
"""

from __future__ import annotations

import logging
import struct
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.storage.metadata_store import MetadataStore

log = logging.getLogger(__name__)

_HEAD = struct.Struct("<BqqII")  # version, mark-delete ledger and entry, acked count, partial count
_PARTIAL = struct.Struct("<qqI")  # batch entry's ledger and entry, word count
_VERSION = 1


@dataclass(frozen=True, slots=True)
class Place:
    """One named place: everything at or before ``mark_delete`` is acknowledged, and so are
    ``acked``; ``partial`` holds batch entries acknowledged in part, as unsigned 64-bit words
    in which a set bit is a message still unacknowledged."""

    mark_delete: Position
    acked: tuple[Position, ...] = ()
    partial: tuple[tuple[Position, tuple[int, ...]], ...] = ()


def encode_place(place: Place) -> bytes:
    """A compact binary form: a header, the acked positions as int64 pairs, then the batches."""
    md = place.mark_delete
    parts = [_HEAD.pack(_VERSION, md.ledger_id, md.entry_id, len(place.acked), len(place.partial))]
    if place.acked:
        parts.append(array("q", [n for p in place.acked for n in p]).tobytes())
    for position, words in place.partial:
        parts.append(_PARTIAL.pack(position.ledger_id, position.entry_id, len(words)))
        parts.append(array("Q", words).tobytes())
    return b"".join(parts)


def decode_place(data: bytes) -> Place:
    """The inverse of ``encode_place``; raises ValueError on anything malformed."""
    if len(data) < _HEAD.size:
        raise ValueError("place too short")
    version, md_ledger, md_entry, n_acked, n_partial = _HEAD.unpack_from(data)
    if version != _VERSION:
        raise ValueError(f"unknown place version {version}")
    offset = _HEAD.size
    end = offset + 16 * n_acked
    if end > len(data):
        raise ValueError("place truncated in its acked positions")
    numbers = array("q")
    numbers.frombytes(data[offset:end])
    acked = tuple(Position(numbers[i], numbers[i + 1]) for i in range(0, len(numbers), 2))
    offset = end
    partial = []
    for _ in range(n_partial):
        if offset + _PARTIAL.size > len(data):
            raise ValueError("place truncated in its batches")
        ledger_id, entry_id, n_words = _PARTIAL.unpack_from(data, offset)
        offset += _PARTIAL.size
        end = offset + 8 * n_words
        if end > len(data):
            raise ValueError("place truncated in a batch's words")
        words = array("Q")
        words.frombytes(data[offset:end])
        partial.append((Position(ledger_id, entry_id), tuple(words)))
        offset = end
    if offset != len(data):
        raise ValueError("trailing bytes after a place")
    return Place(Position(md_ledger, md_entry), acked, tuple(partial))


class PlaceBook:
    """The places of one cursor: changes kept in memory until the managed ledger flushes them.

    Not thread-safe: use it from the thread that owns the managed ledger.
    """

    def __init__(self, metadata: MetadataStore, ml_id: int, cursor: str) -> None:
        self._metadata = metadata
        self._ml_id = ml_id
        self.cursor = cursor
        #: Changes since the last flush: a place to write, or None to delete it.
        self._changes: dict[str, Place | None] = {}
        #: Every stored place is to be deleted before the changes are applied (``clear``).
        self._cleared = False
        # figures
        self.flushes = 0  # storage writes that carried this book's changes
        self.places_written = 0
        self.places_deleted = 0

    def __repr__(self) -> str:
        return f"PlaceBook({self.cursor!r}, changes={len(self._changes)}, cleared={self._cleared})"

    @property
    def dirty(self) -> bool:
        return self._cleared or bool(self._changes)

    def load(self) -> dict[str, Place]:
        """The places as stored (as of the last flush), changes not yet flushed on top.

        A stored place that does not decode is left out (logged): its owner starts over from the
        cursor's own mark-delete position, which is where a new one starts.
        """
        places: dict[str, Place] = {}
        if not self._cleared:
            for name, data in self._metadata.places(self._ml_id, self.cursor):
                try:
                    places[name] = decode_place(data)
                except ValueError as exc:
                    log.warning("cursor %s: place %r is damaged and left out: %s", self.cursor, name, exc)
        for name, place in self._changes.items():
            if place is None:
                places.pop(name, None)
            else:
                places[name] = place
        return places

    def put(self, name: str, place: Place) -> None:
        """Store ``place`` under ``name`` at the next flush."""
        self._changes[name] = place

    def remove(self, name: str) -> None:
        """Delete the place ``name`` at the next flush."""
        self._changes[name] = None

    def clear(self) -> None:
        """Delete every place at the next flush (a seek starts everyone over)."""
        self._changes.clear()
        self._cleared = True

    def take_changes(self) -> tuple[bool, list[tuple[str, bytes]], list[str]]:
        """What the next flush writes (cleared, places to write, names to delete), emptied here."""
        # Consumers that keep up share a place: each distinct one is encoded once.
        encoded: dict[Place, bytes] = {}
        puts: list[tuple[str, bytes]] = []
        deletes: list[str] = []
        for name, place in self._changes.items():
            if place is None:
                deletes.append(name)
                continue
            data = encoded.get(place)
            if data is None:
                data = encoded[place] = encode_place(place)
            puts.append((name, data))
        cleared = self._cleared
        self._changes = {}
        self._cleared = False
        return cleared, puts, deletes

    def give_back(self, cleared: bool, puts: list[tuple[str, bytes]], deletes: list[str]) -> None:
        """Changes whose write failed, kept for the next flush (newer changes win)."""
        if self._cleared:
            return  # cleared since: the failed changes are moot
        newer = self._changes
        self._changes = {name: decode_place(data) for name, data in puts}
        self._changes.update(dict.fromkeys(deletes))
        self._changes.update(newer)
        self._cleared = cleared

    def count_flush(self, puts: int, deletes: int) -> None:
        self.flushes += 1
        self.places_written += puts
        self.places_deleted += deletes

    def stats(self) -> dict[str, int]:
        return {
            "place_flushes": self.flushes,
            "places_written": self.places_written,
            "places_deleted": self.places_deleted,
            "place_changes_pending": len(self._changes),
        }


class PlaceBooks:
    """A managed ledger's place books, by cursor name, flushed together in one storage write."""

    def __init__(self, metadata: MetadataStore, ml_id: int, name: str) -> None:
        self._metadata = metadata
        self._ml_id = ml_id
        self._name = name
        self._books: dict[str, PlaceBook] = {}
        self._failing = False  # a flush failed: logged once until one works again

    def book(self, cursor: str) -> PlaceBook:
        book = self._books.get(cursor)
        if book is None:
            book = self._books[cursor] = PlaceBook(self._metadata, self._ml_id, cursor)
        return book

    def forget(self, cursor: str) -> None:
        """Drop a cursor's book from memory (its stored places go with the cursor's row)."""
        self._books.pop(cursor, None)

    def flush(self) -> None:
        """Write every book's changes in one transaction; on failure they are kept for the next."""
        dirty = [book for book in self._books.values() if book.dirty]
        if not dirty:
            return
        taken = [(book, *book.take_changes()) for book in dirty]
        try:
            self._metadata.write_places(
                self._ml_id, [(book.cursor, cleared, puts, deletes) for book, cleared, puts, deletes in taken]
            )
        except Exception as exc:
            for book, cleared, puts, deletes in taken:
                book.give_back(cleared, puts, deletes)
            if not self._failing:
                self._failing = True
                log.error("%s: writing places failed: %s", self._name, exc)
            raise
        if self._failing:
            self._failing = False
            log.warning("%s: writing places works again", self._name)
        for book, _, puts, deletes in taken:
            book.count_flush(len(puts), len(deletes))
