"""Offset arithmetic and option parsing: pure functions, no Spark session, no broker."""

from __future__ import annotations

import pytest

from magnetar.spark.errors import InvalidOptionError
from magnetar.spark.offsets import EARLIEST, LATEST, IndexRange, rate_limit, split
from magnetar.spark.options import ReadOptions, WriteOptions
from magnetar.spark.sink import sequence_id

T0, T1 = "persistent://public/default/t-partition-0", "persistent://public/default/t-partition-1"


def test_rate_limit_shares_in_proportion_and_is_deterministic():
    assert rate_limit({T0: 0, T1: 0}, {T0: 5, T1: 3}, 100) == {T0: 5, T1: 3}
    assert rate_limit({T0: 0, T1: 10}, {T0: 30, T1: 20}, 10) == {T0: 8, T1: 12}  # 7.5 and 2.5, one more to T0
    assert rate_limit({T0: 0, T1: 0}, {T0: 1, T1: 1}, 1) == {T0: 1, T1: 0}  # remainder in name order
    assert rate_limit({T0: 0, T1: 0}, {T0: 0, T1: 9}, 4) == {T0: 0, T1: 4}


def test_split_cuts_large_ranges_and_honours_min_partitions():
    assert split([IndexRange(T0, 0, 10)], 4) == [
        IndexRange(T0, 0, 4),
        IndexRange(T0, 4, 8),
        IndexRange(T0, 8, 10),
    ]
    assert split([IndexRange(T0, 5, 5), IndexRange(T1, 0, 3)], 100) == [IndexRange(T1, 0, 3)]
    pieces = split([IndexRange(T0, 0, 8), IndexRange(T1, 0, 2)], 100, min_ranges=4)
    assert len(pieces) == 4 and sum(p.size for p in pieces) == 10


def test_read_options():
    opts = ReadOptions.parse(
        {"topics": "a, persistent://t/n/b", "startingOffsets": '{"a-partition-1": 7, "c": -2}'},
        streaming=True,
    )
    assert opts.selection.topics == ("persistent://public/default/a", "persistent://t/n/b")
    assert opts.starting == {
        "persistent://public/default/a-partition-1": 7,
        "persistent://public/default/c": EARLIEST,
    }
    assert (opts.service_url, opts.admin_url) == ("pulsar://localhost:6650", "http://localhost:8080")
    assert ReadOptions.parse({"topic": "a", "endingOffsets": '{"a": -1}'}, streaming=False).ending == {
        "persistent://public/default/a": LATEST
    }
    pattern = ReadOptions.parse({"topicsPattern": "sensor-.*"}, streaming=True).selection
    assert pattern.pattern_namespace == "public/default"
    assert pattern.compiled_pattern.fullmatch("persistent://public/default/sensor-1")


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({}, True, "exactly one of"),
        ({"topic": "a", "topics": "b"}, True, "exactly one of"),
        ({"topic": "a", "startingOffsets": "{oops"}, True, "JSON"),
        ({"topic": "a", "startingOffsets": '{"a": -5}'}, True, "-2 \\(earliest\\)"),
        ({"topic": "a", "startingOffsets": "latest"}, False, "reads nothing"),
        ({"topic": "a", "endingOffsets": "latest"}, True, "batch queries"),
        ({"topic": "a", "maxOffsetsPerTrigger": "0"}, True, "at least 1"),
        ({"topic": "non-persistent://public/default/a"}, True, "only persistent"),
    ],
)
def test_bad_read_options_are_named(options, streaming, message):
    with pytest.raises(InvalidOptionError, match=message):
        ReadOptions.parse(options, streaming=streaming)


def test_write_options_and_sequence_ids():
    opts = WriteOptions.parse({"topic": "out", "enableDeduplication": "true"})
    assert (opts.topic, opts.enable_deduplication, opts.sort_before_write) == (
        "persistent://public/default/out",
        True,
        False,
    )
    assert sequence_id(0, 0) < sequence_id(0, 1) < sequence_id(1, 0) == 1 << 32
