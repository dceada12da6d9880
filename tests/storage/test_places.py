"""Named places on a cursor (places.py): the codec, batched flushes, recovery, and deletion."""

from __future__ import annotations

import pytest

from magnetar.storage import Position
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


def test_a_damaged_place_is_left_out(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    ml.places("fans").put("a", _place(1))
    ml.places("fans").put("b", _place(2))
    ml.flush_cursors()
    storage.metadata.write_places(ml_id(storage), [("fans", False, [("b", b"junk")], [])])
    assert ml.places("fans").load() == {"a": _place(1)}


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
