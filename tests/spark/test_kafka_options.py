"""Kafka-source parity without Spark or a broker: the trigger gate, durations, timestamp options, lag."""

from __future__ import annotations

import json

import pytest

from magnetar.spark.broker_view import by_time
from magnetar.spark.errors import InvalidOptionError
from magnetar.spark.lag import offsets_behind_latest, source_lag
from magnetar.spark.offsets import EARLIEST
from magnetar.spark.options import ReadOptions
from magnetar.spark.trigger import DEFAULT_MAX_TRIGGER_DELAY_MS, TriggerGate, new_offsets, parse_duration_ms

T0, T1 = "persistent://public/default/t-partition-0", "persistent://public/default/t-partition-1"


class Clock:
    """A clock the test moves by hand (seconds, as time.monotonic)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_gate_lets_the_first_trigger_through_then_waits_for_the_minimum():
    clock = Clock()
    gate = TriggerGate(min_offsets=5, max_delay_ms=10_000, clock=clock)
    assert gate.admit(1)  # no trigger before: not held back, as Kafka's source
    clock.now += 1
    assert not gate.admit(4)
    clock.now += 8
    assert not gate.admit(4)  # 9 s since the last batch, below 10 s
    assert gate.admit(5)  # the minimum is there
    clock.now += 9.999
    assert not gate.admit(0)


def test_gate_fires_once_the_delay_passed_since_the_last_admitted_trigger():
    clock = Clock()
    gate = TriggerGate(min_offsets=1_000, max_delay_ms=2_000, clock=clock)
    assert gate.admit(0)
    clock.now += 1.5
    assert not gate.admit(3)
    clock.now += 0.5  # 2 s since the last trigger let through
    assert gate.admit(3)
    clock.now += 1.9  # the delay restarts with every trigger let through
    assert not gate.admit(3)
    clock.now += 0.1
    assert gate.admit(3)


def test_new_offsets_counts_known_ranges_only():
    assert new_offsets({T0: 3, T1: 10}, {T0: 7, T1: 12}) == 6
    assert new_offsets({T0: EARLIEST, T1: 10}, {T0: 7, T1: 10}) == 0  # T0's start unknown
    assert new_offsets({T0: 5}, {T0: 5, T1: 9}) == 0  # T1 not in the start


@pytest.mark.parametrize(
    ("raw", "ms"),
    [("15m", 900_000), ("30s", 30_000), ("500", 500), ("500ms", 500), ("2h", 7_200_000), ("1 min", 60_000)],
)
def test_durations_read_as_spark_time_strings(raw, ms):
    assert parse_duration_ms(raw, "maxTriggerDelay") == ms


def test_trigger_options_parse_with_kafka_defaults():
    base = {"topic": "t"}
    plain = ReadOptions.parse(base, streaming=True)
    assert (
        plain.min_offsets_per_trigger is None and plain.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS
    )
    opts = ReadOptions.parse({**base, "minOffsetsPerTrigger": "50", "maxTriggerDelay": "3s"}, streaming=True)
    assert (opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (50, 3_000)
    with pytest.raises(InvalidOptionError, match="maxTriggerDelay must be a duration"):
        ReadOptions.parse({**base, "maxTriggerDelay": "soon"}, streaming=True)
    with pytest.raises(InvalidOptionError, match="minOffsetsPerTrigger must be at least 1"):
        ReadOptions.parse({**base, "minOffsetsPerTrigger": "0"}, streaming=True)


def test_timestamp_options_parse_by_partition_name():
    stamps = json.dumps({"t-partition-0": 1_700_000_000_000, T1: 5})
    opts = ReadOptions.parse(
        {
            "topic": "t",
            "startingOffsetsByTimestamp": stamps,
            "endingOffsetsByTimestamp": stamps,
            "endingTimestamp": "9",
        },
        streaming=False,
    )
    assert opts.starting_by_timestamp == {T0: 1_700_000_000_000, T1: 5}
    assert opts.ending_by_timestamp == opts.starting_by_timestamp
    assert opts.ending_timestamp == 9


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsetsByTimestamp": "[1]"}, "must be a JSON object of topic partition to timestamp"),
        ({"startingOffsetsByTimestamp": "{}"}, "must be a JSON object"),
        ({"endingOffsetsByTimestamp": json.dumps({T0: -1})}, "must map to a timestamp"),
        ({"endingOffsetsByTimestamp": json.dumps({T0: "1"})}, "must map to a timestamp"),
        ({"startingOffsetsByTimestamp": json.dumps({"non-persistent://public/default/x": 1})}, "persistent"),
        ({"endingTimestamp": "-5"}, "endingTimestamp must be at least 0"),
        (
            {"startingTimestamp": "10", "endingTimestamp": "9"},
            "endingTimestamp 9 is before startingTimestamp 10",
        ),
    ],
)
def test_bad_timestamp_options_are_refused(options, message):
    with pytest.raises(InvalidOptionError, match=message):
        ReadOptions.parse({"topic": "t", **options}, streaming=False)


@pytest.mark.parametrize("name", ["endingTimestamp", "endingOffsetsByTimestamp"])
def test_ending_by_time_is_for_batch_queries(name):
    with pytest.raises(InvalidOptionError, match=f"{name} is for batch queries"):
        ReadOptions.parse({"topic": "t", name: json.dumps({T0: 1}) if "By" in name else "1"}, streaming=True)


def test_offsets_behind_latest_as_kafka_reports_them():
    assert offsets_behind_latest({T0: 3, T1: 10}, {T0: 7, T1: 10}) == {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "4",
        "avgOffsetsBehindLatest": "2.0",
    }
    assert offsets_behind_latest({T0: EARLIEST}, {T0: EARLIEST}) == {}
    progress = {"endOffset": json.dumps({T0: 1}), "latestOffset": json.dumps({T0: 6})}
    assert source_lag(progress)["maxOffsetsBehindLatest"] == "5"
    assert source_lag({"endOffset": None, "latestOffset": None}) == {}


def test_timestamps_place_every_partition_or_those_named():
    assert by_time([T0, T1], 7, {T0: 1}) == {T0: 7, T1: 7}  # one timestamp for all wins
    assert by_time([T0, T1], None, {T0: 1}) == {T0: 1}  # T1 is left to startingOffsets
    assert by_time([T0, T1], None, None) == {}
