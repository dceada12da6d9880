"""Named places on a cursor (places.py): the codec, batched flushes, recovery, and deletion."""

from __future__ import annotations

import pytest

from magnetar.storage import Position
from magnetar.storage.place_pages import PAGES, Page, decode_page, encode_page, page_of
from magnetar.storage.places import Place, decode_place, encode_place

from .conftest import TOPIC, add_durable, payloads

P = Position


def _place(i: int) -> Place:
    return Place(P(3, i), (P(3, i + 2), P(4, 0)), ((P(3, i + 1), (0b1010, 1 << 63)),))


def test_a_place_encodes_and_decodes_to_itself():
    for place in (
        Place(P(1, -1)),
        _place(7),
        Place(P(2, 5), (P(2, 7),)),
        Place(P(-1, -1), (), ((P(1, 1), ()),)),
    ):
        assert decode_place(encode_place(place)) == place


@pytest.mark.parametrize("cut", [1, 5, 20, 30])
def test_a_torn_or_padded_place_is_rejected(cut):
    data = encode_place(_place(1))
    with pytest.raises(ValueError):
        decode_place(data[:-cut])
    with pytest.raises(ValueError):
        decode_place(data + b"\0")


def test_places_are_written_together_in_one_write_per_flush(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    book = ml.places("fans")
    writes = storage.metadata.place_writes
    ml.flush_cursors()
    assert storage.metadata.place_writes == writes  # nothing changed: nothing written
    for i in range(300):
        book.put(f"car-{i}", _place(i))
    ml.places("other").put("x", Place(P(1, 1)))
    ml.flush_cursors()
    assert storage.metadata.place_writes == writes + 1  # 301 places of two cursors: one write
    assert book.stats()["places_written"] == 300 and book.flushes == 1
    for i in range(0, 300, 2):
        book.put(f"car-{i}", _place(i + 1000))
    ml.flush_cursors()
    assert storage.metadata.place_writes == writes + 2
    assert book.places_written == 450
    ml.flush_cursors()
    assert storage.metadata.place_writes == writes + 2


def test_places_come_back_as_of_the_last_flush_after_a_crash(open_storage):
    ml = open_storage().open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    book = ml.places("fans")
    book.put("a", _place(1))
    book.put("b", _place(2))
    book.put("gone", _place(3))
    ml.flush_cursors()
    book.remove("gone")
    book.put("a", _place(50))  # after the last flush: lost by the crash
    assert book.load() == {"a": _place(50), "b": _place(2)}  # what is in memory counts until then
    # no close: a fresh Storage on the same directory plays the process after kill -9
    again = open_storage().open_managed_ledger(TOPIC)
    assert again.places("fans").load() == {"a": _place(1), "b": _place(2), "gone": _place(3)}


def test_a_clean_close_writes_the_last_changes(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    ml.places("fans").put("a", _place(1))
    ml.close()
    assert open_storage().open_managed_ledger(TOPIC).places("fans").load() == {"a": _place(1)}


def test_clear_deletes_the_stored_places_and_keeps_later_ones(open_storage):
    ml = open_storage().open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    book = ml.places("fans")
    book.put("a", _place(1))
    book.put("b", _place(2))
    ml.flush_cursors()
    book.clear()
    book.put("c", _place(3))
    assert book.load() == {"c": _place(3)}
    ml.flush_cursors()
    assert open_storage().open_managed_ledger(TOPIC).places("fans").load() == {"c": _place(3)}


def test_deleting_the_cursor_or_the_managed_ledger_deletes_its_places(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    add_durable(ml, payloads(2))
    for cursor in ("fans", "keep"):
        ml.open_cursor(cursor)
        ml.places(cursor).put("a", _place(1))
    ml.flush_cursors()
    ml.delete_cursor("fans")
    assert ml.places("fans").load() == {}
    assert ml.places("keep").load() == {"a": _place(1)}
    ml.close()
    storage.delete_managed_ledger(TOPIC)
    again = storage.open_managed_ledger(TOPIC)
    assert again.places("keep").load() == {}


def test_a_page_encodes_and_decodes_to_itself():
    for page in ({}, {"a": b"x"}, {"car-é": encode_place(_place(1)), "": b"", "b" * 300: b"\0" * 70}):
        assert decode_page(encode_page(page)) == page


@pytest.mark.parametrize("cut", [1, 4, 9, 20])
def test_a_torn_or_padded_page_is_rejected(cut):
    data = encode_page({"car-1": encode_place(_place(1)), "car-2": encode_place(_place(2))})
    with pytest.raises(ValueError):
        decode_page(data[:-cut])
    with pytest.raises(ValueError):
        decode_page(data + b"\0")


def test_100k_places_are_written_as_pages_not_rows(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    book = ml.places("fans")
    shared = Place(P(3, 9))
    for i in range(100_000):
        book.put(f"car-{i}", shared)
    ml.flush_cursors()
    stored = storage.metadata.place_pages(ml_id(storage), "fans")
    assert len(stored) == PAGES and book.pages_written == PAGES  # every page, each written once
    assert sum(len(decode_page(data)) for _, data in stored) == 100_000
    book.put("car-7", _place(7))
    ml.flush_cursors()
    assert book.pages_written == PAGES + 1  # one change rewrites its page alone
    places = open_storage().open_managed_ledger(TOPIC).places("fans").load()
    assert len(places) == 100_000 and places["car-7"] == _place(7) and places["car-8"] == shared


def test_a_damaged_page_loses_only_its_places(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    names = [f"car-{i}" for i in range(50)]
    for i, name in enumerate(names):
        ml.places("fans").put(name, _place(i))
    ml.flush_cursors()
    damaged = page_of("car-3")
    storage.metadata.write_places(ml_id(storage), [("fans", False, [(damaged, b"junk")], [])])
    places = open_storage().open_managed_ledger(TOPIC).places("fans").load()
    assert set(places) == {n for n in names if page_of(n) != damaged}
    assert all(places[n] == _place(i) for i, n in enumerate(names) if n in places)


def test_places_stored_one_per_row_are_taken_in_and_rewritten_as_pages(open_storage):
    # Before pages each place was a row of its own (the ``places`` table): such places load,
    # and the next flush moves them into pages and deletes the rows.
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    with storage.metadata._commits.transaction() as db:
        db.executemany(
            "INSERT INTO places (ml_id, cursor, name, state) VALUES (?, ?, ?, ?)",
            [(ml_id(storage), "fans", f"car-{i}", encode_place(_place(i))) for i in range(3)],
        )
    ml.close()
    ml = open_storage().open_managed_ledger(TOPIC)
    book = ml.places("fans")
    assert book.load() == {f"car-{i}": _place(i) for i in range(3)}
    book.put("car-9", _place(9))
    ml.flush_cursors()
    again = open_storage()
    assert again.metadata.places(ml_id(again), "fans") == []
    assert again.open_managed_ledger(TOPIC).places("fans").load() == {
        **{f"car-{i}": _place(i) for i in range(3)},
        "car-9": _place(9),
    }


def test_a_failed_write_keeps_the_changes_for_the_next_flush(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    book = ml.places("fans")
    book.put("a", _place(1))
    real = storage.metadata.write_places

    def failing(*args, **kwargs):
        raise OSError("disk on fire")

    storage.metadata.write_places = failing
    try:
        with pytest.raises(OSError):
            ml.flush_cursors()
    finally:
        storage.metadata.write_places = real
    book.put("b", _place(2))
    ml.flush_cursors()
    assert open_storage().open_managed_ledger(TOPIC).places("fans").load() == {"a": _place(1), "b": _place(2)}


def ml_id(storage) -> int:
    record = storage.metadata.managed_ledger(TOPIC)
    assert record is not None
    return record.ml_id


def test_a_page_encodes_the_same_after_its_places_change_as_a_fresh_one():
    # A page keeps its names' bytes between flushes; they are made again when a name comes or goes.
    page = Page({f"car-{i}": encode_place(_place(i)) for i in range(5)})
    assert page.encode() == encode_page(page.places)
    page.put("car-2", encode_place(_place(20)))  # a place changes: names kept
    assert decode_page(page.encode()) == {**page.places, "car-2": encode_place(_place(20))}
    page.put("car-9", encode_place(_place(9)))  # a name comes
    assert page.remove("car-0") and not page.remove("car-0")  # and one goes
    assert page.encode() == encode_page(page.places) and set(decode_page(page.encode())) == {
        "car-1",
        "car-2",
        "car-3",
        "car-4",
        "car-9",
    }
