"""IndividualAcks with a pager: LRU swapping under a memory bound gives the same answers as a plain set."""

from __future__ import annotations

import random

from magnetar.storage.ack_page import PAGE_OVERHEAD_BYTES
from magnetar.storage.ack_state import IndividualAcks
from magnetar.storage.position import Position


class DictPager:
    """Pages in a list, as a cursor ledger would hold them."""

    def __init__(self) -> None:
        self.entries: list[bytes] = []
        self.reads = 0

    def write_page(self, data: bytes) -> int:
        self.entries.append(data)
        return len(self.entries) - 1

    def read_page(self, entry_id: int) -> bytes:
        self.reads += 1
        return self.entries[entry_id]


def fill(acks: IndividualAcks, ledgers: range, per_ledger: int, rng: random.Random) -> set[Position]:
    model = set()
    for ledger_id in ledgers:
        for entry_id in rng.sample(range(per_ledger * 2), per_ledger):
            acks.add(Position(ledger_id, entry_id))
            model.add(Position(ledger_id, entry_id))
    return model


def test_memory_stays_within_the_bound_and_answers_stay_right():
    rng = random.Random(3)
    pager = DictPager()
    limit = 3 * (PAGE_OVERHEAD_BYTES + 4000)
    acks = IndividualAcks(pager, limit)
    model = fill(acks, range(1, 11), 300, rng)
    assert acks.page_count == 10 and acks.resident_count < 10
    assert acks.memory_bytes <= limit and acks.swap_outs > 0
    assert len(acks) == len(model)
    for _ in range(3000):
        position = Position(rng.randrange(1, 11), rng.randrange(600))
        assert (position in acks) == (position in model)
        assert acks.memory_bytes <= limit or acks.resident_count == 1
    assert acks.swap_ins > 0 and pager.reads == acks.swap_ins


def test_run_end_and_next_acked_swap_pages_in():
    pager = DictPager()
    acks = IndividualAcks(pager, memory_limit=0)  # one page in memory at a time
    for ledger_id in (1, 2, 3):
        for entry_id in (2, 3, 4, 8):
            acks.add(Position(ledger_id, entry_id))
    assert acks.resident_count == 1
    assert acks.run_end(Position(1, 2)) == 5
    assert acks.next_acked_in_ledger(Position(2, 5)) == 8
    assert acks.run_end(Position(3, 5)) == 5
    assert acks.resident_count == 1 and acks.swap_ins == 3


def test_a_dirty_page_is_written_before_it_is_swapped_out():
    pager = DictPager()
    acks = IndividualAcks(pager, memory_limit=0)
    acks.add(Position(1, 5))
    acks.add(Position(2, 5))  # swaps ledger 1 out: its page is written first
    assert len(pager.entries) == 1
    acks.add(Position(1, 7))  # swapped back in, changed, and ledger 2 written on the way out
    assert len(pager.entries) == 2
    assert acks.write_dirty_pages() == 1  # only the page in memory can be dirty
    assert Position(1, 5) in acks and Position(1, 7) in acks and Position(2, 5) in acks
    assert [p.ledger_id for p in acks.page_entries()] == [1, 2]


def test_batch_sets_survive_swapping():
    pager = DictPager()
    acks = IndividualAcks(pager, memory_limit=0)
    assert acks.apply_batch(Position(1, 3), [0b1110], 4) == (False, True)
    acks.add(Position(2, 0))
    assert acks.batch(Position(1, 3)) == [0b1110]
    assert acks.apply_batch(Position(1, 3), [0b0110], 4) == (False, True)
    acks.add(Position(2, 1))
    assert acks.apply_batch(Position(1, 3), [0b1001], 4) == (True, True)
    assert acks.batch(Position(1, 3)) is None and acks.partial_batches == 0


def test_dropping_ledgers_behind_the_mark_delete_position_reads_nothing():
    pager = DictPager()
    acks = IndividualAcks(pager, memory_limit=0)
    for ledger_id in (1, 2, 3, 4):
        acks.add(Position(ledger_id, 1))
        acks.add(Position(ledger_id, 3))
    reads = pager.reads
    acks.remove_up_to(Position(2, 9))
    assert acks.ledger_ids() == [3, 4] and pager.reads == reads  # 1 and 2 dropped unread
    assert len(acks) == 4 and acks.range_count == 4
    acks.remove_up_to(Position(3, 0))  # before ledger 3's first ack: nothing to read
    assert pager.reads == reads
    acks.remove_up_to(Position(3, 1))
    assert acks.ledger_ids() == [3, 4] and len(acks) == 3 and pager.reads == reads + 1
    acks.remove_up_to(Position(3, 3))
    assert acks.ledger_ids() == [4]


def test_figures_of_swapped_out_pages_stay_known():
    rng = random.Random(5)
    pager = DictPager()
    acks = IndividualAcks(pager, memory_limit=0)
    model = fill(acks, range(1, 6), 50, rng)
    acks.write_dirty_pages()
    entries = acks.page_entries()
    fresh = IndividualAcks(pager, memory_limit=0)
    fresh.load(entries)
    assert fresh.resident_count == 0
    assert len(fresh) == len(model) and fresh.range_count == acks.range_count
    assert {
        Position(page.ledger_id, e)
        for page in fresh.pages()
        for s, end in page.ranges.ranges()
        for e in range(s, end)
    } == model
    assert fresh.resident_count == 0  # pages() reads without keeping


def test_random_operations_match_a_model_under_a_tiny_bound():
    rng = random.Random(11)
    pager = DictPager()
    acks = IndividualAcks(pager, memory_limit=PAGE_OVERHEAD_BYTES + 200)
    model: set[Position] = set()
    for _ in range(4000):
        op = rng.random()
        position = Position(rng.randrange(1, 6), rng.randrange(100))
        if op < 0.8:
            assert acks.add(position) == (position not in model)
            model.add(position)
        elif op < 0.85:
            acks.remove_up_to(position)
            model = {p for p in model if p > position}
        elif op < 0.9:
            acks.remove_after(position)
            model = {p for p in model if p <= position}
        else:
            assert (position in acks) == (position in model)
        assert len(acks) == len(model)
    assert {p for p in (Position(lid, e) for lid in range(1, 6) for e in range(100)) if p in acks} == model
