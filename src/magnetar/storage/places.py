"""Named places on a cursor: many small acknowledged positions kept under one cursor, written together.

A cursor (a subscription) may carry many *places*, each a name with a mark-delete position,
the entries acknowledged past it and the batches acknowledged in part: the broker keeps one per
consumer of a broadcast subscription, so that a consumer coming back after a restart resumes at
its own place. Storage knows nothing of consumers: it keeps ``(managed ledger, cursor, name) ->
Place``.

Writes are batched: callers ``put`` and ``remove`` places in memory as often as they like, and
``ManagedLedger.flush_cursors`` writes every change of every place book of the managed ledger in
one SQLite transaction (one commit, one WAL fsync), however many places changed. Places are
stored in pages (``place_pages``: a fixed page per name, one row per page), so 100K places that
move between two flushes cost one write of ~1,000 rows, not 100K writes nor 100K rows. What was
changed after the last flush is lost by a crash: the places come back as of that flush.
"""

from __future__ import annotations

import logging
import struct
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.storage import place_pages
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


@dataclass(slots=True)
class PageChanges:
    """What one flush writes for a cursor: with ``cleared`` its stored places are deleted first;
    ``write`` holds ``(page, bytes)``, ``gone`` the pages left empty; ``puts`` and ``deletes``
    count the places changed."""

    cleared: bool
    write: list[tuple[int, bytes]]
    gone: list[int]
    puts: int
    deletes: int


class PlaceBook:
    """The places of one cursor, kept in pages (``place_pages``): changes are held in memory
    until the managed ledger flushes them, and then each page they touch is written whole.

    The book holds every stored place, encoded (read on first use), since a page is rewritten
    whole. Not thread-safe: use it from the thread that owns the managed ledger.
    """

    def __init__(self, metadata: MetadataStore, ml_id: int, cursor: str) -> None:
        self._metadata = metadata
        self._ml_id = ml_id
        self.cursor = cursor
        #: Changes since the last flush: a place to write, or None to delete it.
        self._changes: dict[str, Place | None] = {}
        #: The stored places are all to be deleted before the pages are written (``clear``, or
        #: places found stored one per row, as before pages).
        self._cleared = False
        #: page -> its places (name -> encoded place), with every flushed change (None until read).
        self._pages: dict[int, place_pages.Page] | None = None
        #: Pages whose last write failed: written at the next flush.
        self._unwritten: set[int] = set()
        # figures
        self.flushes = 0  # storage writes that carried this book's changes
        self.places_written = 0
        self.places_deleted = 0
        self.pages_written = 0

    def __repr__(self) -> str:
        return f"PlaceBook({self.cursor!r}, changes={len(self._changes)}, cleared={self._cleared})"

    @property
    def dirty(self) -> bool:
        return self._cleared or bool(self._changes) or bool(self._unwritten)

    def _stored(self) -> dict[int, place_pages.Page]:
        """The pages as stored, read once. A page that does not decode is left out (logged): its
        places' owners start over from the cursor's own mark-delete position, which is where a
        new one starts. Places stored one per row (before pages) are taken in, to be written as
        pages, and their rows deleted, at the next flush."""
        pages = self._pages
        if pages is not None:
            return pages
        pages = self._pages = {}
        for page, data in self._metadata.place_pages(self._ml_id, self.cursor):
            try:
                pages[page] = place_pages.Page(place_pages.decode_page(data))
            except ValueError as exc:
                log.warning("cursor %s: place page %d is damaged and left out: %s", self.cursor, page, exc)
        rows = self._metadata.places(self._ml_id, self.cursor)
        if rows:
            for name, data in rows:
                pages.setdefault(place_pages.page_of(name), place_pages.Page()).put(name, data)
            self._cleared = True
        return pages

    def load(self) -> dict[str, Place]:
        """The places as stored (as of the last flush), changes not yet flushed on top.

        A stored place that does not decode is left out (logged), as a damaged page is.
        """
        places: dict[str, Place] = {}
        for page in self._stored().values():
            for name, data in page.places.items():
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
        self._pages = {}
        self._unwritten.clear()
        self._changes.clear()
        self._cleared = True

    def take_changes(self) -> PageChanges:
        """What the next flush writes, emptied here: the pages in memory hold the changes now."""
        pages = self._stored()
        cleared = self._cleared
        touched = set(pages) if cleared else set(self._unwritten)
        # Consumers that keep up share one place object: each object is encoded once.
        encoded: dict[int, bytes] = {}
        puts = deletes = 0
        page_of = place_pages.page_of
        for name, place in self._changes.items():
            page_no = page_of(name)
            page = pages.get(page_no)
            if place is None:
                if page is not None and page.remove(name):
                    touched.add(page_no)
                    deletes += 1
                continue
            data = encoded.get(id(place))
            if data is None:
                data = encoded[id(place)] = encode_place(place)
            if page is None:
                page = pages[page_no] = place_pages.Page()
            page.put(name, data)
            touched.add(page_no)
            puts += 1
        write, gone = [], []
        for n in sorted(touched):
            page = pages.get(n)
            if page:
                write.append((n, page.encode()))
            else:
                pages.pop(n, None)
                gone.append(n)
        self._changes = {}
        self._cleared = False
        self._unwritten = set()
        return PageChanges(cleared, write, gone, puts, deletes)

    def give_back(self, changes: PageChanges) -> None:
        """Their write failed: the pages in memory still hold them; write those pages (and the
        clearing) at the next flush."""
        self._cleared = self._cleared or changes.cleared
        self._unwritten.update(n for n, _ in changes.write)
        self._unwritten.update(changes.gone)

    def count_flush(self, changes: PageChanges) -> None:
        self.flushes += 1
        self.places_written += changes.puts
        self.places_deleted += changes.deletes
        self.pages_written += len(changes.write)

    def stats(self) -> dict[str, int]:
        return {
            "place_flushes": self.flushes,
            "places_written": self.places_written,
            "places_deleted": self.places_deleted,
            "place_pages_written": self.pages_written,
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
        taken = [(book, book.take_changes()) for book in dirty]
        try:
            self._metadata.write_places(
                self._ml_id, [(book.cursor, c.cleared, c.write, c.gone) for book, c in taken]
            )
        except Exception as exc:
            for book, changes in taken:
                book.give_back(changes)
            if not self._failing:
                self._failing = True
                log.error("%s: writing places failed: %s", self._name, exc)
            raise
        if self._failing:
            self._failing = False
            log.warning("%s: writing places works again", self._name)
        for book, changes in taken:
            book.count_flush(changes)
