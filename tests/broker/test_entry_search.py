"""The binary search over stored entries passes over damaged ones (issue 34): pure logic, any
monotonic answer, any set of damaged entries, checked against a scan (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.entry_search import first_readable
from magnetar.storage.errors import EntryNotFoundError
from magnetar.storage.position import Position


class Space:
    """An ``EntrySpace`` of one ledger: ordinal i is entry i."""

    def __init__(self, size: int) -> None:
        self.size = size

    def position(self, ordinal: int) -> Position:
        return Position(0, ordinal)


def search(values: list[int], damaged: set[int], at_least: int) -> tuple[int, list[int]]:
    reads: list[int] = []

    def read(position: Position) -> bytes:
        reads.append(position.entry_id)
        if position.entry_id in damaged:
            raise EntryNotFoundError(f"entry {position} is damaged")
        return values[position.entry_id].to_bytes(4, "big")

    found = first_readable(Space(len(values)), read, lambda data: int.from_bytes(data, "big") >= at_least)
    return found, reads


@given(
    st.lists(st.integers(0, 50), max_size=200).map(sorted),
    st.data(),
    st.integers(-1, 52),
)
def test_it_answers_the_first_readable_entry_a_scan_finds(values, data, at_least):
    damaged = data.draw(st.sets(st.integers(0, max(len(values) - 1, 0)))) if values else set()
    found, _ = search(values, damaged, at_least)
    readable = [i for i in range(len(values)) if i not in damaged]
    assert found == next((i for i in readable if values[i] >= at_least), len(values))


def test_a_damaged_midpoint_costs_a_read_more_not_an_error():
    values = list(range(2000))
    found, reads = search(values, {1000}, 1500)
    assert found == 1500
    assert reads[:2] == [1000, 1001] and len(reads) <= 13
    assert len(set(reads)) == len(reads)  # no entry read twice
    assert search(values, {1000}, 1000)[0] == 1001  # the damaged one is never the answer
