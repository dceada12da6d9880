"""A durable cursor placed in a compacted view before the managed ledger's first entry (the view's
ledgers trimmed since): it keeps acknowledgements of the view's messages there, its mark-delete
position moves over them as over entries, a rewind goes back to just after it (where a compacted
read goes on), and all of it survives a reopen."""

from __future__ import annotations

from magnetar.storage import Position

from .conftest import TOPIC, add_durable, payloads

SMALL = {"max_ledger_size_bytes": 80}  # 3 entries of 20 bytes per ledger


def _trimmed_view(ml) -> tuple[list[Position], list[Position]]:
    """12 entries in 4 ledgers; a view of 5 of them (as a compacted ledger would keep them): 3 in
    the first two ledgers, trimmed, and 2 after. The entries and the view's positions."""
    p = add_durable(ml, payloads(12, size=20))  # ledgers: p0-2, p3-5, p6-8, p9-11
    view = [p[1], p[2], p[4], p[7], p[10]]
    ml.set_compacted_positions(view)
    holder = ml.open_cursor("holder", "earliest")
    holder.mark_delete(p[5])
    assert ml.trim() == [p[0].ledger_id, p[3].ledger_id]
    ml.delete_cursor("holder")
    return p, view


def test_below_the_first_entry_only_the_views_positions_count(open_storage):
    ml = open_storage(**SMALL).open_managed_ledger(TOPIC)
    p, view = _trimmed_view(ml)
    assert ml.before_first() == Position(p[6].ledger_id, -1)
    assert ml.compacted_after(Position.EARLIEST) == view[0]
    assert ml.compacted_after(view[2]) is None  # view[3] is an entry of the managed ledger
    assert ml.holds_compacted(view[1]) and not ml.holds_compacted(p[3]) and not ml.holds_compacted(view[3])


def test_acknowledgements_in_trimmed_ledgers_are_kept_and_move_the_mark_delete_position(open_storage):
    ml = open_storage(**SMALL).open_managed_ledger(TOPIC)
    p, view = _trimmed_view(ml)
    cursor = ml.open_cursor("sub", "earliest")
    assert cursor.mark_delete_position == Position(p[6].ledger_id, -1)
    cursor.reset_exactly(view[0])  # placed at the view's start
    assert cursor.mark_delete_position == Position(view[0].ledger_id, 0)
    assert cursor.read_position == view[0]
    cursor.delete([view[1], view[2], p[3]])  # p3 is no message of the view
    assert cursor.mark_delete_position == Position(view[0].ledger_id, 0)  # view[0] is not acknowledged
    assert cursor.is_acked(view[1]) and cursor.is_acked(view[2]) and not cursor.is_acked(view[0])
    assert cursor.backlog() == 6  # p6..p11: the view's acknowledgements are not entries
    cursor.rewind()
    assert cursor.read_position == view[0]  # a compacted read goes on there
    assert [e.position for e in cursor.read_entries(2)] == [p[6], p[7]]  # a plain one at the first entry
    cursor.delete([view[0]])  # the last one before the first entry: to just before it
    assert cursor.mark_delete_position == Position(p[6].ledger_id, -1)
    assert cursor.individually_deleted_count() == 0


def test_a_cumulative_acknowledgement_in_the_view_and_a_reopen(open_storage):
    storage = open_storage(**SMALL)
    ml = storage.open_managed_ledger(TOPIC)
    p, view = _trimmed_view(ml)
    cursor = ml.open_cursor("sub", "earliest")
    cursor.reset_exactly(view[0])
    cursor.mark_delete(view[0])
    cursor.delete([view[2]])
    assert cursor.mark_delete_position == view[0]
    cursor.flush()
    storage.close()
    ml = open_storage(**SMALL).open_managed_ledger(TOPIC)
    ml.set_compacted_positions(view)
    cursor = ml.cursors()["sub"]
    assert cursor.mark_delete_position == view[0]
    assert cursor.read_position == Position(view[0].ledger_id, view[0].entry_id + 1)
    assert cursor.is_acked(view[2]) and not cursor.is_acked(view[1])
    cursor.delete([view[1]])
    assert cursor.mark_delete_position == Position(p[6].ledger_id, -1)
    assert ml.trim() == []  # it held every ledger while it was in the view


def test_a_batch_of_the_view_acknowledged_in_parts(open_storage):
    ml = open_storage(**SMALL).open_managed_ledger(TOPIC)
    _, view = _trimmed_view(ml)
    cursor = ml.open_cursor("sub", "earliest")
    cursor.reset_exactly(view[0])
    assert not cursor.ack_batch_indexes(view[0], [0b1100], 4)  # messages 0 and 1 of 4
    assert cursor.batch_ack_set(view[0]) == [0b1100]
    assert cursor.ack_batch_indexes(view[0], [0b0000], 4)
    assert cursor.mark_delete_position == view[0]
