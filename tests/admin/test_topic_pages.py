"""The console's topic list: partitions folded into their topic, searched and paged on the broker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.admin import topic_pages
from magnetar.admin.topic_pages import TopicRow, page, rows_of

NS = "persistent://public/default"


def test_a_partitioned_topic_is_one_row_with_its_count():
    stored = [f"{NS}/orders-partition-0", f"{NS}/orders-partition-1", f"{NS}/b", f"{NS}/a"]
    rows = rows_of(stored, {f"{NS}/orders": 3})
    assert rows == [TopicRow(f"{NS}/a"), TopicRow(f"{NS}/b"), TopicRow(f"{NS}/orders", 3)]


def test_a_stored_partition_without_its_metadata_stays_a_row():
    # Nothing stored is hidden: a partition whose partitioned topic is gone is listed by itself.
    rows = rows_of([f"{NS}/gone-partition-0"], {})
    assert rows == [TopicRow(f"{NS}/gone-partition-0")]


def test_search_matches_every_word_whatever_the_case():
    rows = rows_of([f"{NS}/city-Area-17-alerts", f"{NS}/city-area-2", f"{NS}/other"], {})
    assert [r.name for r in page(rows, "AREA 17", 0, 10).rows] == [f"{NS}/city-Area-17-alerts"]
    assert page(rows, "area", 0, 10).total == 2
    assert page(rows, "  ", 0, 10).total == 3


def test_pages_are_bounded():
    rows = [TopicRow(f"{NS}/t{i:05d}") for i in range(1200)]
    last = page(rows, "", 1150, 100)
    assert (last.total, last.offset, len(last.rows)) == (1200, 1150, 50)
    assert page(rows, "", 0, 10_000).limit == topic_pages.PAGE_LIMIT
    with pytest.raises(ValueError):
        page(rows, "", -1, 10)
    with pytest.raises(ValueError):
        page(rows, "", 0, 0)


def test_a_row_as_json_names_its_domain_and_local_name():
    row = TopicRow("non-persistent://t/ns/x", 2).to_json()
    assert row == {
        "name": "non-persistent://t/ns/x",
        "domain": "non-persistent",
        "localName": "x",
        "partitions": 2,
    }


names = st.lists(st.text("abc-1", min_size=1, max_size=6), unique=True, max_size=40)


@given(names, st.text("abc", max_size=2), st.integers(1, 7))
def test_the_pages_together_are_every_match_once_in_order(locals_, search, limit):
    rows = rows_of([f"{NS}/{name}" for name in locals_], {})
    seen: list[TopicRow] = []
    offset = 0
    while True:
        one = page(rows, search, offset, limit)
        seen += one.rows
        offset += limit
        if offset >= one.total:
            break
    assert seen == [r for r in rows if search in r.name]
