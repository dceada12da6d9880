"""ManagedCursor: reads, individual and cumulative acks, batch-index acks, reset, persistence."""

from __future__ import annotations

import pytest

from magnetar.storage import ManagedLedger, Position

from .conftest import TOPIC, add_durable, payloads


@pytest.fixture
def small_ledgers(open_storage) -> ManagedLedger:
    """Rolls over every 3 entries of 20 bytes (3 * 28 bytes >= 80)."""
    return open_storage(max_ledger_size_bytes=80).open_managed_ledger(TOPIC)


def test_latest_and_earliest_initial_positions(ml):
    before = add_durable(ml, payloads(3))
    latest = ml.open_cursor("latest")
    earliest = ml.open_cursor("earliest", "earliest")
    assert latest.mark_delete_position == before[-1] and latest.backlog() == 0
    assert earliest.read_position == before[0] and earliest.backlog() == 3
    assert ml.open_cursor("latest") is latest
    after = add_durable(ml, payloads(2, tag="n"))
    assert [e.position for e in latest.read_entries(10)] == after
    assert ml.cursors() == {"latest": latest, "earliest": earliest}


def test_earliest_on_an_empty_managed_ledger_reads_the_first_entry(ml):
    cursor = ml.open_cursor("c", "earliest")
    assert not cursor.has_more_entries()
    positions = add_durable(ml, payloads(2))
    assert cursor.has_more_entries()
    assert [e.position for e in cursor.read_entries(10)] == positions


def test_read_entries_advances_and_respects_bounds(small_ledgers):
    ml = small_ledgers
    positions = add_durable(ml, payloads(10, size=20))
    cursor = ml.open_cursor("c", "earliest")
    assert [e.position for e in cursor.read_entries(4)] == positions[:4]
    assert cursor.read_position == positions[4]
    assert [e.position for e in cursor.read_entries(100, max_bytes=45)] == positions[4:6]
    assert [e.position for e in cursor.read_entries(100, max_bytes=1)] == positions[6:7]
    assert [e.position for e in cursor.read_entries(100)] == positions[7:]
    assert not cursor.has_more_entries()
    assert cursor.read_entries(10) == []
    assert cursor.read_position == ml.next_position(positions[-1])


def test_individual_acks_leave_holes_and_mark_delete_closes_them_across_ledgers(small_ledgers):
    ml = small_ledgers
    p = add_durable(ml, payloads(9, size=20))  # ledgers of 3 entries: p[0..2], p[3..5], p[6..8]
    assert p[2].ledger_id != p[3].ledger_id
    cursor = ml.open_cursor("c", "earliest")
    cursor.delete([p[1], p[2], p[3], p[5]])
    assert cursor.mark_delete_position == ml.previous_position(p[0])
    assert cursor.individually_deleted_count() == 4
    assert cursor.backlog() == 5
    assert cursor.is_acked(p[3]) and not cursor.is_acked(p[4])
    cursor.delete([p[0]])  # closes the first hole: advances over p[1..3], crossing a ledger
    assert cursor.mark_delete_position == p[3]
    assert cursor.individually_deleted_count() == 1
    cursor.delete([p[4]])
    assert cursor.mark_delete_position == p[5]
    assert cursor.individually_deleted_count() == 0
    assert cursor.backlog() == 3


def test_reads_skip_individually_deleted_entries(small_ledgers):
    ml = small_ledgers
    p = add_durable(ml, payloads(9, size=20))
    cursor = ml.open_cursor("c", "earliest")
    cursor.delete([p[1], p[2], p[3], p[7]])
    assert [e.position for e in cursor.read_entries(100)] == [p[0], p[4], p[5], p[6], p[8]]
    cursor.rewind()
    assert [e.position for e in cursor.read_entries(2)] == [p[0], p[4]]
    assert cursor.read_position == p[5]


def test_mark_delete_is_cumulative(small_ledgers):
    ml = small_ledgers
    p = add_durable(ml, payloads(9, size=20))
    cursor = ml.open_cursor("c", "earliest")
    cursor.delete([p[2], p[6], p[7]])
    cursor.mark_delete(p[4])
    assert cursor.mark_delete_position == p[4]
    assert cursor.individually_deleted_ranges() == [(p[6].ledger_id, 0, 2)]
    cursor.mark_delete(p[1])  # behind: no-op
    assert cursor.mark_delete_position == p[4]
    cursor.mark_delete(p[5])  # and then on over the acked run p[6], p[7]
    assert cursor.mark_delete_position == p[7]
    assert cursor.individually_deleted_count() == 0
    assert cursor.read_position == p[8]
    cursor.mark_delete(Position(p[8].ledger_id, 1000))  # past the last entry: clamped
    assert cursor.mark_delete_position == p[8] == ml.last_confirmed
    assert cursor.backlog() == 0


def test_acks_of_positions_with_no_readable_entry_are_ignored(open_storage):
    ml = open_storage(fsync_policy="interval", fsync_interval_ms=300).open_managed_ledger(TOPIC)
    (durable,) = add_durable(ml, [b"a"])
    cursor = ml.open_cursor("c", "earliest")
    pending = ml.add_entry(b"b")
    cursor.delete([pending, Position(durable.ledger_id, 50), Position(12345, 0)])
    assert cursor.individually_deleted_count() == 0
    assert not cursor.ack_batch_indexes(pending, [0], 10)
    assert cursor.mark_delete_position == ml.previous_position(durable)


def test_batch_index_acks_and_with_java_bitset_words(ml):
    p = add_durable(ml, payloads(3))
    cursor = ml.open_cursor("c", "earliest")
    batch = p[1]
    size = 100  # two words: bits 0..63 and 64..99
    high = (1 << 36) - 1  # word 1: messages 64..99 all unacked
    # ack message 0 and message 63: word 0 loses bits 0 and 63, so it becomes 0x7FFF...FFFE (positive)
    assert cursor.ack_batch_indexes(batch, [0x7FFF_FFFF_FFFF_FFFE, high], size) is False
    assert cursor.batch_ack_set(batch) == [0x7FFF_FFFF_FFFF_FFFE, (1 << 36) - 1]
    # another request still has bit 63 set (negative word) and lacks message 70: the AND keeps both acks
    assert cursor.ack_batch_indexes(batch, [-2, high & ~(1 << 6)], size) is False
    assert cursor.batch_ack_set(batch) == [0x7FFF_FFFF_FFFF_FFFE, ((1 << 36) - 1) & ~(1 << 6)]
    assert not cursor.is_acked(batch)
    assert [e.position for e in cursor.read_entries(10)] == p  # partly acked batches are still delivered
    # bits past the batch size are ignored; a missing word means "all acked"
    assert cursor.ack_batch_indexes(batch, [0, 1 << 40], size) is True
    assert cursor.batch_ack_set(batch) is None
    assert cursor.is_acked(batch) and cursor.individually_deleted_count() == 1
    assert cursor.ack_batch_indexes(batch, [-1], size) is True  # already acked


def test_negative_words_keep_the_high_bit(ml):
    (position,) = add_durable(ml, [b"batch"])
    cursor = ml.open_cursor("c", "earliest")
    only_last = -(1 << 63)  # Java long with just bit 63 set: message 63 still unacked
    assert cursor.ack_batch_indexes(position, [only_last], 64) is False
    assert cursor.batch_ack_set(position) == [only_last]
    assert cursor.ack_batch_indexes(position, [0], 64) is True
    assert cursor.mark_delete_position == position


def test_completing_a_batch_advances_mark_delete(ml):
    p = add_durable(ml, payloads(2))
    cursor = ml.open_cursor("c", "earliest")
    cursor.ack_batch_indexes(p[0], [0b110], 3)
    cursor.delete([p[1]])
    assert cursor.mark_delete_position == ml.previous_position(p[0])
    cursor.ack_batch_indexes(p[0], [0b010], 3)
    cursor.ack_batch_indexes(p[0], [0b100], 3)
    assert cursor.mark_delete_position == p[1]
    assert cursor.batch_ack_set(p[0]) is None


def test_reset_forgets_acks_and_moves_both_positions(small_ledgers):
    ml = small_ledgers
    p = add_durable(ml, payloads(9, size=20))
    cursor = ml.open_cursor("c", "earliest")
    cursor.mark_delete(p[7])
    cursor.reset(p[3])  # first entry of the second ledger
    assert cursor.mark_delete_position == p[2]  # the last entry of the first ledger
    assert cursor.read_position == p[3]
    assert cursor.backlog() == 6
    cursor.delete([p[5]])
    cursor.ack_batch_indexes(p[6], [1], 2)
    cursor.reset(Position.EARLIEST)
    assert cursor.individually_deleted_count() == 0 and cursor.batch_ack_set(p[6]) is None
    assert cursor.read_position == p[0] and cursor.backlog() == 9
    assert [e.position for e in cursor.read_entries(100)] == p


def test_seek_and_rewind(ml):
    p = add_durable(ml, payloads(6))
    cursor = ml.open_cursor("c", "earliest")
    cursor.mark_delete(p[1])
    cursor.read_entries(100)
    cursor.seek(p[4])
    assert [e.position for e in cursor.read_entries(100)] == p[4:]
    cursor.seek(p[0])  # before the mark-delete position: starts after it
    assert cursor.read_position == p[2]
    cursor.read_entries(100)
    cursor.rewind()
    assert cursor.read_position == p[2]


def test_durable_state_survives_reopen(open_storage):
    storage = open_storage(max_ledger_size_bytes=80)
    ml = storage.open_managed_ledger(TOPIC)
    p = add_durable(ml, payloads(9, size=20))
    cursor = ml.open_cursor("c", "earliest")
    cursor.mark_delete(p[1])
    cursor.delete([p[3], p[4], p[7]])
    cursor.ack_batch_indexes(p[5], [-(1 << 63) | 1, -1], 128)
    cursor.read_entries(100)
    ml.flush_cursors()
    assert not cursor.dirty
    cursor.delete([p[8]])  # not flushed: lost on a crash, so the entry is delivered again
    ml.open_cursor("gone")
    ml.delete_cursor("gone")
    ml.delete_cursor("never existed")

    recovered_ml = open_storage(max_ledger_size_bytes=80).open_managed_ledger(TOPIC)  # a crash: no close
    (recovered,) = recovered_ml.cursors().values()
    assert recovered.name == "c" and recovered.durable
    assert recovered.mark_delete_position == p[1]
    assert recovered.individually_deleted_ranges() == [(p[3].ledger_id, 0, 2), (p[7].ledger_id, 1, 2)]
    assert recovered.batch_ack_set(p[5]) == [-(1 << 63) | 1, -1]
    assert recovered.read_position == p[2]
    assert [e.position for e in recovered.read_entries(100)] == [p[2], p[5], p[6], p[8]]
    assert recovered.backlog() == 9 - 2 - 3


def test_close_flushes_cursors(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    p = add_durable(ml, payloads(4))
    ml.open_cursor("c", "earliest").delete([p[0], p[2]])
    storage.close()
    cursor = open_storage().open_managed_ledger(TOPIC).open_cursor("c")
    assert cursor.mark_delete_position == p[0]
    assert cursor.is_acked(p[2]) and not cursor.is_acked(p[1])


def test_non_durable_cursor_is_not_persisted(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    p = add_durable(ml, payloads(5))
    reader = ml.new_non_durable_cursor(p[2])
    assert not reader.durable
    assert reader.read_position == p[2] and reader.mark_delete_position == p[1]
    assert [e.position for e in reader.read_entries(100)] == p[2:]
    reader.mark_delete(p[3])
    reader.flush()
    assert ml.cursors() == {}
    from_start = ml.new_non_durable_cursor(Position.EARLIEST)
    assert [e.position for e in from_start.read_entries(100)] == p
    at_end = ml.new_non_durable_cursor(ml.next_position(ml.last_confirmed))
    assert at_end.read_entries(100) == [] and at_end.backlog() == 0
    storage.close()
    assert open_storage().open_managed_ledger(TOPIC).cursors() == {}


def test_flush_is_a_no_op_when_nothing_changed(ml):
    add_durable(ml, payloads(2))
    cursor = ml.open_cursor("c", "earliest")
    assert not cursor.dirty
    cursor.read_entries(10)  # reading is not persisted state
    assert not cursor.dirty
    cursor.mark_delete(ml.last_confirmed)
    assert cursor.dirty
    before = cursor.persists
    cursor.flush()
    assert not cursor.dirty
    assert cursor.persists == before + 1  # what an MQTT session waits for (broker/mqtt/session.py)
    cursor.flush()
    assert cursor.persists == before + 1
