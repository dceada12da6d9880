"""Positions, ledger lists (how positions step across ledgers) and directory names."""

from __future__ import annotations

import pytest

from magnetar.storage.ledger_list import LedgerList
from magnetar.storage.names import encode_name
from magnetar.storage.position import Position


def test_positions_order_by_ledger_then_entry():
    assert Position(1, 99) < Position(2, 0) < Position(2, 1)
    assert Position.EARLIEST < Position(0, -1) < Position(0, 0)
    assert str(Position(3, 4)) == "3:4"
    with pytest.raises(AttributeError):
        Position(1, 2).entry_id = 3  # type: ignore[misc]


@pytest.fixture
def ledgers() -> LedgerList:
    """Ledger 2 (3 entries), 5 (2 entries), 9 (open, 1 entry)."""
    ll = LedgerList()
    ll.append(2, 3)
    ll.append(5, 2)
    ll.append(9, 1)
    return ll


def test_next_position_crosses_ledgers_and_stops_one_past_the_end(ledgers):
    assert ledgers.next_position(Position(2, 1)) == Position(2, 2)
    assert ledgers.next_position(Position(2, 2)) == Position(5, 0)
    assert ledgers.next_position(Position(5, 1)) == Position(9, 0)
    assert ledgers.next_position(Position(9, 0)) == Position(9, 1)
    assert ledgers.next_position(Position.EARLIEST) == Position(2, 0)
    assert ledgers.next_position(Position(1, 7)) == Position(2, 0)  # trimmed ledger: next one


def test_previous_position_crosses_back(ledgers):
    assert ledgers.previous_position(Position(5, 0)) == Position(2, 2)
    assert ledgers.previous_position(Position(5, 1)) == Position(5, 0)
    assert ledgers.previous_position(Position(2, 0)) == Position(2, -1)
    assert ledgers.previous_position(Position.EARLIEST) == Position.EARLIEST


def test_ceil_skips_missing_ledgers_and_empty_closed_ones():
    ll = LedgerList()
    ll.append(1, 2)
    ll.append(4, 0)
    ll.append(6, 0)
    assert ll.ceil(Position(1, 2)) == Position(6, 0)  # ledger 4 is empty: nothing to point at
    assert ll.ceil(Position(3, 0)) == Position(6, 0)
    assert ll.ceil(Position(6, 5)) == Position(6, 5)
    assert ll.last_position() == Position(1, 1)
    assert ll.first_position() == Position(1, 0)


def test_number_of_entries_counts_only_existing(ledgers):
    assert ledgers.number_of_entries(Position.EARLIEST, Position(9, 0)) == 6
    assert ledgers.number_of_entries(Position(2, 1), Position(5, 0)) == 3
    assert ledgers.number_of_entries(Position(2, 1), Position(2, 99)) == 2
    assert ledgers.number_of_entries(Position(5, 5), Position(5, 9)) == 0
    assert ledgers.exists(Position(5, 1)) and not ledgers.exists(Position(5, 2))


def test_empty_managed_ledger_positions():
    ll = LedgerList()
    ll.append(7)
    assert ll.last_position() == Position(7, -1)
    assert ll.first_position() is None
    assert ll.next_position(Position(7, -1)) == Position(7, 0)


@pytest.mark.parametrize(
    "name",
    ["persistent://public/default/t", ".", "..", "a/../b", "", "ümlaut topic", "x" * 400, "%41", "A"],
)
def test_encoded_names_are_single_safe_path_components(name):
    encoded = encode_name(name)
    assert encoded and "/" not in encoded and encoded not in (".", "..")
    assert set(encoded) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_%~")
    assert len(encoded) <= 200


def test_encoded_names_stay_distinct():
    names = ["a/b", "a%2Fb", "a_b", "A/b", "x" * 300 + "1", "x" * 300 + "2"]
    assert len({encode_name(n) for n in names}) == len(names)
