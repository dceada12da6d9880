"""Virtual cursors kept on a cursor (virtual_cursors.py): the codec, batched flushes, recovery and
deletion."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.storage import Position
from magnetar.storage.virtual_cursor_buckets import BUCKETS, Bucket, bucket_of, decode_bucket, encode_bucket
from magnetar.storage.virtual_cursors import VirtualCursorState, decode_state, encode_state

from .conftest import TOPIC, add_durable, payloads

P = Position


def _state(i: int) -> VirtualCursorState:
    return VirtualCursorState(P(3, i), (P(3, i + 2), P(4, 0)), ((P(3, i + 1), (0b1010, 1 << 63)),))


#: What the broker wrote when these were "places" in "place pages": the bytes must not change,
#: so that existing data directories open as they are.
STORED_STATE = bytes.fromhex(
    "010300000000000000070000000000000002000000010000000300000000000000090000000000000004000000000000"
    "00000000000000000003000000000000000800000000000000020000000a000000000000000000000000000080"
)
STORED_BUCKET = (
    bytes.fromhex("010200000005000000020000005d000000010000006361722d31c3a9") + STORED_STATE + b"x"
)


def test_states_and_buckets_keep_the_bytes_stored_before_the_names_changed():
    state = VirtualCursorState(P(3, 7), (P(3, 9), P(4, 0)), ((P(3, 8), (0b1010, 1 << 63)),))
    assert encode_state(state) == STORED_STATE and decode_state(STORED_STATE) == state
    assert encode_bucket({"car-1": STORED_STATE, "é": b"x"}) == STORED_BUCKET
    assert (bucket_of("car-1"), bucket_of("vehicle-42")) == (13, 55)


def test_a_state_encodes_and_decodes_to_itself():
    for state in (
        VirtualCursorState(P(1, -1)),
        _state(7),
        VirtualCursorState(P(2, 5), (P(2, 7),)),
        VirtualCursorState(P(-1, -1), (), ((P(1, 1), ()),)),
    ):
        assert decode_state(encode_state(state)) == state


def test_a_state_with_an_epoch_keeps_it_and_one_without_keeps_the_old_bytes():
    for state in (
        VirtualCursorState(P(1, -1), epoch=3),
        replace(_state(7), epoch=1 << 40),
    ):
        data = encode_state(state)
        assert data[0] == 2 and decode_state(data) == state
    assert (
        encode_state(VirtualCursorState(P(3, 7), (P(3, 9), P(4, 0)), ((P(3, 8), (0b1010, 1 << 63)),), 0))
        == STORED_STATE
    )
    with pytest.raises(ValueError, match="epoch 0"):
        decode_state(b"\x02" + STORED_STATE[1:] + bytes(8))  # version 2 is never written with 0
    with pytest.raises(ValueError):
        decode_state(b"\x02" + STORED_STATE[1:])  # no epoch: the last words are taken for one


@given(st.binary(max_size=120))
def test_any_bytes_decode_to_a_state_or_a_value_error(data):
    try:
        state = decode_state(data)
    except ValueError:
        return
    assert encode_state(state) == data


@pytest.mark.parametrize("cut", [1, 5, 20, 30])
def test_a_torn_or_padded_state_is_rejected(cut):
    data = encode_state(_state(1))
    with pytest.raises(ValueError):
        decode_state(data[:-cut])
    with pytest.raises(ValueError):
        decode_state(data + b"\0")


def test_virtual_cursors_are_written_together_in_one_write_per_flush(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    store = ml.virtual_cursors("fans")
    writes = storage.metadata.virtual_cursor_writes
    ml.flush_cursors()
    assert storage.metadata.virtual_cursor_writes == writes  # nothing changed: nothing written
    for i in range(300):
        store.put(f"car-{i}", _state(i))
    ml.virtual_cursors("other").put("x", VirtualCursorState(P(1, 1)))
    ml.flush_cursors()
    assert (
        storage.metadata.virtual_cursor_writes == writes + 1
    )  # 301 virtual cursors of two cursors: one write
    assert store.stats()["virtual_cursors_written"] == 300 and store.flushes == 1
    for i in range(0, 300, 2):
        store.put(f"car-{i}", _state(i + 1000))
    ml.flush_cursors()
    assert storage.metadata.virtual_cursor_writes == writes + 2
    assert store.written == 450
    ml.flush_cursors()
    assert storage.metadata.virtual_cursor_writes == writes + 2


def test_virtual_cursors_come_back_as_of_the_last_flush_after_a_crash(open_storage):
    ml = open_storage().open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    store = ml.virtual_cursors("fans")
    store.put("a", _state(1))
    store.put("b", _state(2))
    store.put("gone", _state(3))
    ml.flush_cursors()
    store.remove("gone")
    store.put("a", _state(50))  # after the last flush: lost by the crash
    assert store.load() == {"a": _state(50), "b": _state(2)}  # what is in memory counts until then
    # no close: a fresh Storage on the same directory plays the process after kill -9
    again = open_storage().open_managed_ledger(TOPIC)
    assert again.virtual_cursors("fans").load() == {"a": _state(1), "b": _state(2), "gone": _state(3)}


def test_a_clean_close_writes_the_last_changes(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    ml.virtual_cursors("fans").put("a", _state(1))
    ml.close()
    assert open_storage().open_managed_ledger(TOPIC).virtual_cursors("fans").load() == {"a": _state(1)}


def test_clear_deletes_the_stored_virtual_cursors_and_keeps_later_ones(open_storage):
    ml = open_storage().open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    store = ml.virtual_cursors("fans")
    store.put("a", _state(1))
    store.put("b", _state(2))
    ml.flush_cursors()
    store.clear()
    store.put("c", _state(3))
    assert store.load() == {"c": _state(3)}
    ml.flush_cursors()
    assert open_storage().open_managed_ledger(TOPIC).virtual_cursors("fans").load() == {"c": _state(3)}


def test_deleting_the_cursor_or_the_managed_ledger_deletes_its_virtual_cursors(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    add_durable(ml, payloads(2))
    for cursor in ("fans", "keep"):
        ml.open_cursor(cursor)
        ml.virtual_cursors(cursor).put("a", _state(1))
    ml.flush_cursors()
    ml.delete_cursor("fans")
    assert ml.virtual_cursors("fans").load() == {}
    assert ml.virtual_cursors("keep").load() == {"a": _state(1)}
    ml.close()
    storage.delete_managed_ledger(TOPIC)
    again = storage.open_managed_ledger(TOPIC)
    assert again.virtual_cursors("keep").load() == {}


def test_a_bucket_encodes_and_decodes_to_itself():
    for bucket in ({}, {"a": b"x"}, {"car-é": encode_state(_state(1)), "": b"", "b" * 300: b"\0" * 70}):
        assert decode_bucket(encode_bucket(bucket)) == bucket


@pytest.mark.parametrize("cut", [1, 4, 9, 20])
def test_a_torn_or_padded_bucket_is_rejected(cut):
    data = encode_bucket({"car-1": encode_state(_state(1)), "car-2": encode_state(_state(2))})
    with pytest.raises(ValueError):
        decode_bucket(data[:-cut])
    with pytest.raises(ValueError):
        decode_bucket(data + b"\0")


def test_100k_virtual_cursors_are_written_as_buckets_not_rows(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    store = ml.virtual_cursors("fans")
    shared = VirtualCursorState(P(3, 9))
    for i in range(100_000):
        store.put(f"car-{i}", shared)
    ml.flush_cursors()
    stored = storage.metadata.virtual_cursor_buckets(ml_id(storage), "fans")
    assert len(stored) == BUCKETS and store.buckets_written == BUCKETS  # every bucket, each written once
    assert sum(len(decode_bucket(data)) for _, data in stored) == 100_000
    store.put("car-7", _state(7))
    ml.flush_cursors()
    assert store.buckets_written == BUCKETS + 1  # one change rewrites its bucket alone
    states = open_storage().open_managed_ledger(TOPIC).virtual_cursors("fans").load()
    assert len(states) == 100_000 and states["car-7"] == _state(7) and states["car-8"] == shared


def test_a_damaged_bucket_loses_only_its_virtual_cursors(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    names = [f"car-{i}" for i in range(50)]
    for i, name in enumerate(names):
        ml.virtual_cursors("fans").put(name, _state(i))
    ml.flush_cursors()
    damaged = bucket_of("car-3")
    storage.metadata.write_virtual_cursors(ml_id(storage), [("fans", False, [(damaged, b"junk")], [])])
    states = open_storage().open_managed_ledger(TOPIC).virtual_cursors("fans").load()
    assert set(states) == {n for n in names if bucket_of(n) != damaged}
    assert all(states[n] == _state(i) for i, n in enumerate(names) if n in states)


def test_virtual_cursors_stored_one_per_row_are_taken_in_and_rewritten_as_buckets(open_storage):
    # Before buckets each virtual cursor was a row of its own (the ``places`` table): such rows
    # load, and the next flush moves them into buckets and deletes the rows.
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    with storage.metadata._commits.transaction() as db:
        db.executemany(
            "INSERT INTO places (ml_id, cursor, name, state) VALUES (?, ?, ?, ?)",
            [(ml_id(storage), "fans", f"car-{i}", encode_state(_state(i))) for i in range(3)],
        )
    ml.close()
    ml = open_storage().open_managed_ledger(TOPIC)
    store = ml.virtual_cursors("fans")
    assert store.load() == {f"car-{i}": _state(i) for i in range(3)}
    store.put("car-9", _state(9))
    ml.flush_cursors()
    again = open_storage()
    assert again.metadata.unbucketed_virtual_cursors(ml_id(again), "fans") == []
    assert again.open_managed_ledger(TOPIC).virtual_cursors("fans").load() == {
        **{f"car-{i}": _state(i) for i in range(3)},
        "car-9": _state(9),
    }


def test_a_failed_write_keeps_the_changes_for_the_next_flush(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("fans")
    store = ml.virtual_cursors("fans")
    store.put("a", _state(1))
    real = storage.metadata.write_virtual_cursors

    def failing(*args, **kwargs):
        raise OSError("disk on fire")

    storage.metadata.write_virtual_cursors = failing
    try:
        with pytest.raises(OSError):
            ml.flush_cursors()
    finally:
        storage.metadata.write_virtual_cursors = real
    store.put("b", _state(2))
    ml.flush_cursors()
    assert open_storage().open_managed_ledger(TOPIC).virtual_cursors("fans").load() == {
        "a": _state(1),
        "b": _state(2),
    }


def ml_id(storage) -> int:
    record = storage.metadata.managed_ledger(TOPIC)
    assert record is not None
    return record.ml_id


def test_a_bucket_encodes_the_same_after_its_states_change_as_a_fresh_one():
    # A bucket keeps its names' bytes between flushes; they are made again when a name comes or goes.
    bucket = Bucket({f"car-{i}": encode_state(_state(i)) for i in range(5)})
    assert bucket.encode() == encode_bucket(bucket.states)
    bucket.put("car-2", encode_state(_state(20)))  # a state changes: names kept
    assert decode_bucket(bucket.encode()) == {**bucket.states, "car-2": encode_state(_state(20))}
    bucket.put("car-9", encode_state(_state(9)))  # a name comes
    assert bucket.remove("car-0") and not bucket.remove("car-0")  # and one goes
    assert bucket.encode() == encode_bucket(bucket.states) and set(decode_bucket(bucket.encode())) == {
        "car-1",
        "car-2",
        "car-3",
        "car-4",
        "car-9",
    }
