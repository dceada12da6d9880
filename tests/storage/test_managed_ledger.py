"""ManagedLedger: appends, reads across ledger rollover, positions, properties, lifecycle."""

from __future__ import annotations

import time

import pytest

from magnetar.storage import EntryNotFoundError, Position, StorageClosedError
from magnetar.storage.entry_cache import ENTRY_OVERHEAD

from .conftest import TOPIC, add_durable, payloads


def test_entries_read_back_byte_for_byte(ml):
    datas = [b"", b"\x00\x01\x02", bytes(range(256)) * 40, b"x"]
    positions = add_durable(ml, datas)
    assert [ml.read_entry(p).data for p in positions] == datas
    assert [e.data for e in ml.read_entries(Position.EARLIEST, 10)] == datas


def test_positions_are_consecutive_and_last_confirmed_follows(ml):
    first_ledger = ml.current_ledger_id
    assert ml.last_confirmed == Position(first_ledger, -1) == ml.last_added
    assert ml.first_position() is None
    positions = add_durable(ml, payloads(3))
    assert positions == [Position(first_ledger, i) for i in range(3)]
    assert ml.last_confirmed == ml.last_added == positions[-1]
    assert ml.first_position() == positions[0]


def test_append_and_read_across_rollover(open_storage):
    storage = open_storage(max_ledger_size_bytes=100)
    ml = storage.open_managed_ledger(TOPIC)
    datas = payloads(30, size=20)
    positions = add_durable(ml, datas)
    ledger_ids = sorted({p.ledger_id for p in positions})
    assert len(ledger_ids) >= 5
    infos = ml.ledgers()
    assert [i.ledger_id for i in infos] == ledger_ids
    assert all(i.closed for i in infos[:-1]) and not infos[-1].closed
    assert sum(i.entries for i in infos) == 30
    assert all(i.size_bytes >= 100 for i in infos[:-1])  # each rolled once past the limit
    assert ml.size_bytes() == sum(i.size_bytes for i in infos) >= 30 * 20  # the open ledger too
    assert [e.data for e in ml.read_entries(Position.EARLIEST, 100)] == datas
    assert [e.position for e in ml.read_entries(positions[3], 100)] == positions[3:]
    for position, data in zip(positions, datas, strict=True):
        assert ml.read_entry(position).data == data
    assert ml.number_of_entries(Position.EARLIEST, ml.last_confirmed) == 30
    assert ml.number_of_entries(positions[5], positions[20]) == 16


def test_next_position_crosses_ledgers(open_storage):
    ml = open_storage(max_ledger_size_bytes=1).open_managed_ledger(TOPIC)  # one entry per ledger
    a, b, c = add_durable(ml, payloads(3))
    assert a.ledger_id < b.ledger_id < c.ledger_id
    assert ml.next_position(a) == b
    assert ml.next_position(Position.EARLIEST) == a
    assert ml.next_position(c) == Position(c.ledger_id, 1)  # where the next add goes
    assert ml.previous_position(b) == a


def test_size_after_a_position_counts_later_ledgers_whole_and_its_own_in_part(open_storage):
    ml = open_storage(max_ledger_size_bytes=250).open_managed_ledger(TOPIC)
    positions = add_durable(ml, payloads(12, size=50))
    infos = ml.ledgers()
    assert len(infos) >= 3
    before_all = Position(infos[0].ledger_id, -1)
    assert ml.size_after(before_all) == ml.size_bytes()
    assert ml.size_after(positions[-1]) == 0
    first = infos[0]
    end_of_first = Position(first.ledger_id, first.entries - 1)
    assert ml.size_after(end_of_first) == ml.size_bytes() - first.size_bytes
    middle = Position(first.ledger_id, first.entries // 2 - 1)  # half the first ledger's entries after it
    later = ml.size_bytes() - first.size_bytes
    assert (
        ml.size_after(middle)
        == later + first.size_bytes * (first.entries - first.entries // 2) // first.entries
    )
    sizes = [ml.size_after(p) for p in positions]
    assert sizes == sorted(sizes, reverse=True)  # never grows as the position moves on


def test_read_entries_bounds(ml):
    datas = [b"a" * 10, b"b" * 20, b"c" * 30, b"d" * 40]
    positions = add_durable(ml, datas)
    assert len(ml.read_entries(positions[0], 2)) == 2
    assert [e.data for e in ml.read_entries(positions[0], 10, max_bytes=30)] == datas[:2]
    assert [e.data for e in ml.read_entries(positions[0], 10, max_bytes=29)] == datas[:1]
    assert [e.data for e in ml.read_entries(positions[3], 10, max_bytes=1)] == datas[3:]  # at least one
    assert ml.read_entries(positions[3], 10, max_bytes=1, at_least_one=False) == []
    assert ml.read_entries(ml.next_position(positions[3]), 10) == []
    assert ml.read_entries(positions[0], 0) == []


def test_reads_never_pass_last_confirmed(open_storage):
    storage = open_storage(fsync_policy="interval", fsync_interval_ms=200)
    ml = storage.open_managed_ledger(TOPIC)
    add_durable(ml, [b"durable"])
    pending = ml.add_entry(b"not yet")
    assert ml.last_added == pending and ml.last_confirmed < pending
    assert [e.data for e in ml.read_entries(Position.EARLIEST, 10)] == [b"durable"]
    with pytest.raises(EntryNotFoundError):
        ml.read_entry(pending)
    with pytest.raises(KeyError):  # the broker catches it as a KeyError
        ml.read_entry(Position(pending.ledger_id, 99))


def test_entry_cache_serves_tail_reads(storage, ml):
    ml.open_cursor("sub")
    positions = add_durable(ml, payloads(5))
    hits = storage.entry_cache.hits
    assert len(ml.read_entries(positions[0], 5)) == 5
    assert storage.entry_cache.hits == hits + 5


def test_entries_added_while_no_cursor_could_read_them_are_not_cached(storage, ml):
    datas = payloads(3)
    positions = add_durable(ml, datas)  # a topic only written to: nobody reads at the tail
    assert len(storage.entry_cache) == 0 and storage.entry_cache.size_bytes == 0
    assert [e.data for e in ml.read_entries(positions[0], 10)] == datas  # from the files
    assert ml.read_entry(positions[-1]).data == datas[-1]
    cursor = ml.open_cursor("sub", "earliest")
    later = add_durable(ml, [b"read at the tail"])
    assert len(storage.entry_cache) == 1
    assert [e.data for e in cursor.read_entries(10)] == [*datas, b"read at the tail"]
    assert ml.read_entry(later[0]).data == b"read at the tail"


def test_a_live_readers_cursor_has_added_entries_cached_and_a_gone_one_not(storage, ml):
    reader = ml.new_non_durable_cursor(Position.EARLIEST)
    add_durable(ml, [b"one"])
    assert len(storage.entry_cache) == 1
    assert [e.data for e in reader.read_entries(10)] == [b"one"]
    del reader  # a reader's cursor is held weakly: closed, it is gone
    add_durable(ml, [b"two"])
    assert len(storage.entry_cache) == 1
    assert [e.data for e in ml.read_entries(Position.EARLIEST, 10)] == [b"one", b"two"]


def test_entry_cache_is_bounded_and_reads_fall_back_to_disk(open_storage):
    budget = 2 * (100 + ENTRY_OVERHEAD) + 50
    storage = open_storage(entry_cache_bytes=budget)
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("sub")
    datas = payloads(10, size=100)
    positions = add_durable(ml, datas)
    assert storage.entry_cache.size_bytes <= budget and len(storage.entry_cache) == 2
    assert [e.data for e in ml.read_entries(positions[0], 10)] == datas
    assert ml.read_entry(positions[-1]).data == datas[-1]


def test_a_disabled_entry_cache_holds_nothing_even_for_empty_entries(open_storage):
    storage = open_storage(entry_cache_bytes=0)
    ml = storage.open_managed_ledger(TOPIC)
    positions = add_durable(ml, [b""] * 5)
    assert len(storage.entry_cache) == 0
    assert [e.data for e in ml.read_entries(positions[0], 10)] == [b""] * 5


def test_rollover_by_age_is_checked_on_add(open_storage):
    ml = open_storage(max_ledger_age_seconds=1.0).open_managed_ledger(TOPIC)
    first = add_durable(ml, [b"a", b"b"])  # well within the age, even on a loaded machine
    assert first[0].ledger_id == first[1].ledger_id
    time.sleep(1.05)  # not a wait for an event: the ledger must grow older than its maximum age
    (later,) = add_durable(ml, [b"c"])
    assert later == Position(ml.current_ledger_id, 0) and later.ledger_id > first[1].ledger_id


def test_properties_are_durable(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    assert ml.get_property("seq") is None
    ml.set_property("seq", '{"p1": 7}')
    ml.set_property("other", "x")
    ml.set_property("other", "y")
    storage.close()
    ml = open_storage().open_managed_ledger(TOPIC)
    assert ml.get_property("seq") == '{"p1": 7}'
    assert ml.properties() == {"seq": '{"p1": 7}', "other": "y"}
    ml.delete_property("other")
    assert ml.get_property("other") is None


def test_broker_wide_key_values(storage):
    storage.metadata.put("ns/public/default", "{}")
    storage.metadata.put("ns/public/other", "1")
    storage.metadata.put("x", "2")
    assert storage.metadata.keys("ns/") == ["ns/public/default", "ns/public/other"]
    assert storage.metadata.get("x") == "2"
    storage.metadata.delete("x")
    assert storage.metadata.get("x") is None


def test_managed_ledgers_are_listed_reopened_and_deleted(open_storage, tmp_path):
    storage = open_storage()
    names = ["persistent://public/default/a", "persistent://t/ns/../../escape", "."]
    for name in names:
        add_durable(storage.open_managed_ledger(name), [name.encode()])
    assert storage.open_managed_ledger(names[0]) is storage.open_managed_ledger(names[0])
    assert storage.managed_ledger_names() == sorted(names)
    ledger_dirs = set((tmp_path / "data/ledgers").iterdir())
    assert len(ledger_dirs) == 3
    assert {p.parent for p in (tmp_path / "data").rglob("*.log")} == ledger_dirs
    storage.delete_managed_ledger(names[1])
    storage.delete_managed_ledger("never existed")
    assert storage.managed_ledger_names() == sorted([names[0], names[2]])
    assert len(list((tmp_path / "data/ledgers").iterdir())) == 2
    again = storage.open_managed_ledger(names[1])
    assert again.read_entries(Position.EARLIEST, 10) == []
    assert again.open_cursor("s").backlog() == 0


def test_ledger_ids_are_global_and_never_reused(storage):
    a = storage.open_managed_ledger("a")
    b = storage.open_managed_ledger("b")
    assert a.current_ledger_id != b.current_ledger_id
    storage.delete_managed_ledger("a")
    c = storage.open_managed_ledger("a")
    assert c.current_ledger_id > b.current_ledger_id


def test_closed_objects_fail_fast(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.close()
    ml.close()
    with pytest.raises(StorageClosedError):
        ml.add_entry(b"x")
    with pytest.raises(StorageClosedError):
        ml.read_entries(Position.EARLIEST, 1)
    reopened = storage.open_managed_ledger(TOPIC)
    assert reopened is not ml
    storage.close()
    storage.close()
    with pytest.raises(StorageClosedError):
        storage.open_managed_ledger(TOPIC)
    with pytest.raises(StorageClosedError):
        reopened.add_entry(b"x")


def test_bad_arguments_are_rejected(ml, tmp_path):
    from magnetar.storage import StorageConfig

    with pytest.raises(ValueError):
        ml.open_cursor("c", initial_position="middle")
    with pytest.raises(ValueError):
        StorageConfig(tmp_path, fsync_policy="sometimes")
    with pytest.raises(ValueError):
        StorageConfig(tmp_path, max_ledger_size_bytes=0)


def test_a_read_only_view_is_kept_as_given_and_anything_mutable_is_copied(ml):
    ml.open_cursor("sub")  # entries are cached while a cursor could read them
    kept = memoryview(bytearray(b"large message " * 100)).toreadonly()
    mutable = bytearray(b"mutable bytes")
    positions = add_durable(ml, [kept, memoryview(mutable), mutable])
    mutable[0:7] = b"CHANGED"
    assert ml.read_entry(positions[0]).data is kept  # the entry cache holds the caller's view
    assert [bytes(ml.read_entry(p).data) for p in positions[1:]] == [b"mutable bytes"] * 2
    assert all(isinstance(ml.read_entry(p).data, bytes) for p in positions[1:])
