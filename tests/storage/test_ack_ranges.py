"""RangeSet and IndividualAcks (without a pager): the per-ledger structure individual acks live in."""

from __future__ import annotations

import itertools
import random

from magnetar.storage.ack_ranges import RangeSet
from magnetar.storage.ack_state import IndividualAcks
from magnetar.storage.position import Position


def test_adjacent_values_merge_into_one_range():
    ranges = RangeSet()
    for value in (3, 5, 4, 1, 2):
        assert ranges.add(value)
    assert ranges.ranges() == [(1, 6)]
    assert len(ranges) == 5
    assert not ranges.add(4)
    assert len(ranges) == 5


def test_add_range_bridges_and_counts_only_new_values():
    ranges = RangeSet()
    ranges.add_range(0, 3)
    ranges.add_range(10, 12)
    ranges.add_range(20, 25)
    assert ranges.add_range(2, 21) == (10 - 3) + (20 - 12)
    assert ranges.ranges() == [(0, 25)]
    assert len(ranges) == 25


def test_membership_run_end_and_next():
    ranges = RangeSet()
    ranges.add_range(5, 8)
    ranges.add_range(10, 11)
    assert 5 in ranges and 7 in ranges and 10 in ranges
    assert 4 not in ranges and 8 not in ranges and 9 not in ranges
    assert ranges.run_end(6) == 8
    assert ranges.run_end(9) == 9
    assert ranges.next_at_or_after(0) == 5
    assert ranges.next_at_or_after(6) == 6
    assert ranges.next_at_or_after(8) == 10
    assert ranges.next_at_or_after(11) is None


def test_remove_below_and_from_trim_ranges():
    ranges = RangeSet()
    ranges.add_range(0, 5)
    ranges.add_range(8, 12)
    ranges.remove_below(10)
    assert ranges.ranges() == [(10, 12)]
    assert len(ranges) == 2
    ranges.add_range(20, 30)
    assert ranges.remove_from(25) == 5
    assert ranges.ranges() == [(10, 12), (20, 25)]
    assert len(ranges) == 7


def test_matches_a_plain_set_under_random_operations():
    rng = random.Random(7)
    ranges, model = RangeSet(), set()
    for _ in range(2000):
        op = rng.random()
        if op < 0.7:
            start = rng.randrange(300)
            end = start + rng.randrange(1, 6)
            assert ranges.add_range(start, end) == len(set(range(start, end)) - model)
            model.update(range(start, end))
        elif op < 0.85:
            cut = rng.randrange(300)
            ranges.remove_below(cut)
            model = {v for v in model if v >= cut}
        else:
            cut = rng.randrange(300)
            ranges.remove_from(cut)
            model = {v for v in model if v < cut}
        assert len(ranges) == len(model)
    assert {v for s, e in ranges.ranges() for v in range(s, e)} == model
    starts_ends = ranges.ranges()
    assert all(e1 < s2 for (_, e1), (s2, _) in itertools.pairwise(starts_ends))


def test_individual_acks_are_grouped_per_ledger():
    acks = IndividualAcks()
    for position in (Position(3, 1), Position(3, 2), Position(5, 0), Position(7, 4)):
        acks.add(position)
    assert acks.ledger_ids() == [3, 5, 7]
    assert [(p.ledger_id, p.ranges.ranges()) for p in acks.pages()] == [
        (3, [(1, 3)]),
        (5, [(0, 1)]),
        (7, [(4, 5)]),
    ]
    assert Position(3, 2) in acks and Position(3, 3) not in acks
    assert acks.run_end(Position(3, 1)) == 3
    assert acks.next_acked_in_ledger(Position(7, 0)) == 4
    acks.remove_up_to(Position(5, 0))
    assert acks.ledger_ids() == [7]
    assert len(acks) == 1 and acks.range_count == 1
    acks.add(Position(7, 9))
    assert acks.remove_after(Position(7, 4))
    assert not acks.remove_after(Position(7, 4))
    assert acks.ledger_ids() == [7] and len(acks) == 1
