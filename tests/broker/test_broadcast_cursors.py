"""The broadcast subscription's pure parts: the lowest of many positions, one consumer's virtual
cursor, and the window of entries read for consumers still to be served."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.dispatchers.entry_window import EntryWindow
from magnetar.broker.dispatchers.position_floor import PositionFloor
from magnetar.broker.dispatchers.virtual_cursor import VirtualCursor
from magnetar.broker.entries import DispatchEntry
from magnetar.storage import batch_acks
from magnetar.storage.position import Position


def P(entry: int, ledger: int = 1) -> Position:
    return Position(ledger, entry)


def next_position(p: Position) -> Position:
    return Position(p.ledger_id, p.entry_id + 1)


def nothing_settled(p: Position) -> bool:
    return False


def test_floor_is_the_lowest_present_position():
    floor = PositionFloor()
    assert floor.lowest() is None
    for e in (5, 3, 3, 9):
        floor.add(P(e))
    assert floor.lowest() == P(3) and len(floor) == 4
    floor.move(P(3), P(7))
    assert floor.lowest() == P(3)  # the other consumer at 3 is still there
    floor.move(P(3), P(8))
    assert floor.lowest() == P(5)
    floor.remove(P(5))
    assert floor.lowest() == P(7)
    floor.clear()
    assert floor.lowest() is None and len(floor) == 0


@given(st.lists(st.tuples(st.integers(0, 19), st.integers(0, 60)), max_size=300))
def test_floor_matches_the_minimum_of_moving_members(moves):
    members = [P(0)] * 20
    floor = PositionFloor()
    for m in members:
        floor.add(m)
    for who, to in moves:
        floor.move(members[who], P(to))
        members[who] = P(to)
        assert floor.lowest() == min(members)


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=200))
def test_moving_several_together_is_moving_each(moves):
    # The dispatcher moves a group read together in one step (``move_many``).
    members = [P(e % 7) for e in range(40)]
    together, one_by_one = PositionFloor(), PositionFloor()
    for m in members:
        together.add(m)
        one_by_one.add(m)
    for frm, to in moves:
        movers = [i for i, m in enumerate(members) if m == P(frm)][: 1 + to % 5]
        together.move_many(P(frm), P(to), len(movers))
        for i in movers:
            one_by_one.move(members[i], P(to))
            members[i] = P(to)
        assert together.lowest() == one_by_one.lowest() == min(members)
        assert len(together) == len(one_by_one) == len(members)
    with pytest.raises(ValueError):
        together.move_many(min(members), P(99), len(members) + 1)


def test_floor_heap_stays_bounded_below_a_slow_member():
    floor = PositionFloor()
    floor.add(P(0))  # the slow consumer never moves
    fast = P(1)
    floor.add(fast)
    for e in range(2, 20_000):
        floor.move(fast, P(e))
        fast = P(e)
    assert floor.lowest() == P(0)
    assert len(floor._heap) < 200  # stale positions were dropped, not kept one per move


def test_individual_acks_move_the_mark_delete_position_over_runs():
    vc = VirtualCursor(P(-1), P(0))
    vc.ack(P(1))
    vc.ack(P(2))
    assert not vc.advance(next_position, nothing_settled)
    assert vc.mark_delete == P(-1) and vc.is_acked(P(2)) and not vc.is_acked(P(0))
    vc.ack(P(0))
    assert vc.advance(next_position, nothing_settled)
    assert vc.mark_delete == P(2)


def test_advance_passes_entries_the_subscription_settled():
    vc = VirtualCursor(P(-1), P(0))
    vc.ack(P(0))
    assert vc.advance(next_position, lambda p: p in {P(1), P(2)})
    assert vc.mark_delete == P(2)


def test_cumulative_ack_forgets_everything_before():
    vc = VirtualCursor(P(-1), P(10))
    vc.ack(P(7))
    vc.replay.add(P(3))
    vc.replay.add(P(8))
    vc.redelivery_counts[P(3)] = 2
    vc.ack_through(P(5))
    assert vc.mark_delete == P(5)
    assert vc.is_acked(P(7)) and not vc.is_acked(P(6))
    assert vc.replay.pop_first(5) == [P(8)]
    assert vc.redelivery_counts == {}
    vc.ack_through(P(4))  # behind: nothing changes
    assert vc.mark_delete == P(5)


def test_batch_index_acks_are_per_consumer_and_complete_the_entry():
    vc = VirtualCursor(P(-1), P(1))
    # A batch of 3: bits set = still unacked. Message 0 acked, then 2, then 1.
    assert not vc.ack_batch_indexes(P(0), [0b110], 3)
    assert vc.batch_ack_set(P(0)) == batch_acks.to_signed([0b110])
    assert not vc.ack_batch_indexes(P(0), [0b011], 3)
    assert vc.batch_ack_set(P(0)) == [0b010]
    assert vc.ack_batch_indexes(P(0), [0b101], 3)
    vc.ack(P(0))
    assert vc.advance(next_position, nothing_settled)
    assert vc.batch_ack_set(P(0)) is None and vc.mark_delete == P(0)


def test_skip_to_moves_both_positions_and_drops_what_is_behind():
    vc = VirtualCursor(P(2), P(5))
    vc.ack(P(4))
    vc.replay.add(P(3))
    vc.skip_to(P(8), next_position)
    assert vc.mark_delete == P(8) and vc.read_position == P(9)
    assert len(vc.replay) == 0
    vc2 = VirtualCursor(P(2), P(20))
    vc2.skip_to(P(8), next_position)
    assert vc2.read_position == P(20)  # already read further: keeps reading there


def test_random_individual_acks_end_with_everything_acked():
    order = list(range(200))
    random.Random(7).shuffle(order)
    vc = VirtualCursor(P(-1), P(200))
    for e in order:
        vc.ack(P(e))
        vc.advance(next_position, nothing_settled)
        assert all(vc.is_acked(P(x)) for x in range(0, vc.mark_delete.entry_id + 1))
    assert vc.mark_delete == P(199)


def window_item(entry: int, size: int = 10) -> DispatchEntry:
    return DispatchEntry(P(entry), b"x" * size, 0, 1, None)


def test_entry_window_keeps_what_consumers_still_need_within_its_limits():
    window = EntryWindow(max_entries=3, max_bytes=100)
    for e in range(3):
        window.add(window_item(e))
    assert len(window) == 3 and window.bytes == 30
    window.add(window_item(3))  # over the entry limit: the oldest goes
    assert window.get(P(0)) is None and window.get(P(3)) is not None
    window.evict_below(P(3))  # every consumer reads at 3 or later
    assert len(window) == 1 and window.bytes == 10
    window.add(window_item(4, size=95))  # over the byte limit: the oldest goes, the newest stays
    assert window.get(P(3)) is None and window.get(P(4)) is not None and window.bytes == 95
    window.evict_below(None)
    assert len(window) == 0 and window.bytes == 0
