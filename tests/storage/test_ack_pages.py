"""The PIP 81 entry formats: columns and varints, pages, markers; damaged input is refused."""

from __future__ import annotations

import random
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.storage.ack_codec import (
    compress,
    decompress,
    get_column,
    get_varint,
    put_column,
    put_varint,
    unzigzag,
    zigzag,
)
from magnetar.storage.ack_marker import Marker, PageEntry, is_marker
from magnetar.storage.ack_page import AckPage, is_page
from magnetar.storage.ack_ranges import RangeSet
from magnetar.storage.position import Position


@given(st.lists(st.integers(0, (1 << 64) - 1), max_size=50))
def test_varints_round_trip(values):
    out = bytearray()
    for value in values:
        put_varint(out, value)
    pos, got = 0, []
    for _ in values:
        value, pos = get_varint(out, pos)
        got.append(value)
    assert got == values and pos == len(out)


@given(st.integers(-(1 << 62), 1 << 62))
def test_zigzag_round_trips(value):
    assert unzigzag(zigzag(value)) == value and zigzag(value) >= 0


@pytest.mark.parametrize("top, width", [(0, 1), (255, 1), (256, 2), (65_535, 2), (65_536, 4), (1 << 40, 8)])
def test_columns_use_the_smallest_width(top, width):
    out = bytearray()
    put_column(out, array("q", [0, top, 1]))
    assert out[0] == width and len(out) == 1 + 3 * width
    column, pos = get_column(bytes(out), 0, 3)
    assert list(column) == [0, top, 1] and pos == len(out)


def test_truncated_varints_and_columns_are_refused():
    with pytest.raises(ValueError):
        get_varint(b"\x80\x80", 0)
    out = bytearray()
    put_column(out, array("q", [1, 2, 3]))
    with pytest.raises(ValueError):
        get_column(bytes(out[:-1]), 0, 3)
    with pytest.raises(ValueError):
        get_column(b"\x03\x00", 0, 1)  # no such width


def test_compression_round_trips_and_falls_back_to_raw():
    body = b"abc" * 1000
    assert decompress(compress(body)) == body and len(compress(body)) < 100
    tiny = b"\x01"
    assert compress(tiny) == b"\x00\x01" and decompress(compress(tiny)) == tiny
    with pytest.raises(ValueError):
        decompress(b"\x01not zstd")


def random_page(rng: random.Random, ledger_id: int, holes: int, batches: int = 0) -> AckPage:
    page = AckPage(ledger_id)
    entry = rng.randrange(3)
    for _ in range(holes):
        length = rng.randrange(1, 20)
        page.add_range(entry, entry + length)
        entry += length + rng.randrange(1, 50)
    for _ in range(batches):
        entry += rng.randrange(1, 50)
        page.set_batch(entry, [rng.getrandbits(64) or 1 for _ in range(rng.randrange(1, 4))])
    return page


def test_a_page_round_trips_ranges_and_batch_sets():
    page = random_page(random.Random(1), 42, holes=5000, batches=30)
    data = page.encode()
    assert is_page(data) and not is_marker(data)
    back = AckPage.decode(data)
    assert back.ledger_id == 42
    assert back.ranges.ranges() == page.ranges.ranges() and len(back.ranges) == len(page.ranges)
    assert back.batches == page.batches
    assert len(data) < 5000 * 3  # compact: a few bytes a hole


@given(st.sets(st.integers(0, 2000), max_size=300), st.integers(0, 1 << 40))
def test_any_set_of_entries_round_trips(entries, ledger_id):
    page = AckPage(ledger_id)
    for entry in entries:
        page.add(entry)
    back = AckPage.decode(page.encode())
    assert {e for s, e_ in back.ranges.ranges() for e in range(s, e_)} == entries
    assert back.ledger_id == ledger_id


def test_an_every_other_entry_page_is_tiny():
    page = AckPage(
        1, RangeSet.from_arrays(array("q", range(0, 200_000, 2)), array("q", range(1, 200_001, 2)))
    )
    assert len(page.ranges) == 100_000
    assert len(page.encode()) < 1000


def test_damaged_pages_are_refused():
    data = random_page(random.Random(2), 7, holes=100).encode()
    for bad in (data[:-3], data[:4] + b"\x02" + data[5:], b"MgPX" + data[4:], data + b"\x00"):
        with pytest.raises(ValueError):
            AckPage.decode(bad)


def test_pages_that_decode_to_overlapping_ranges_are_refused():
    with pytest.raises(ValueError):
        RangeSet.from_arrays(array("q", [0, 5]), array("q", [6, 8]))
    with pytest.raises(ValueError):
        RangeSet.from_arrays(array("q", [0, 5]), array("q", [5, 8]))  # touching: should have merged
    with pytest.raises(ValueError):
        RangeSet.from_arrays(array("q", [3]), array("q", [3]))


def test_a_marker_round_trips():
    pages = [
        PageEntry(lid, 10 + lid, 300 + lid, 1000 * lid, 7 * lid, lid % 3, lid, 5000 * lid)
        for lid in range(3, 300, 7)
    ]
    marker = Marker(Position(3, -1), previous=9, pages=pages)
    data = marker.encode()
    assert is_marker(data) and not is_page(data)
    assert Marker.decode(data) == marker
    assert Marker.decode(Marker(Position.EARLIEST).encode()) == Marker(Position(-1, -1), -1, [])


def test_torn_or_corrupt_markers_are_refused():
    data = Marker(Position(5, 9), 3, [PageEntry(5, 1, 100, 10, 2, 0, 3, 90)]).encode()
    flipped = bytearray(data)
    flipped[-1] ^= 0x40
    for bad in (data[:-1], data[:6], bytes(flipped), b"MgM2" + data[4:]):
        with pytest.raises(ValueError):
            Marker.decode(bad)
