"""The lean broadcast generator (``bench/lean``): its pure parts, and a smoke run end to end.

The smoke run drives a few hundred raw-frame consumers over two processes plus a slice through
the official client against a real broker, and checks that every consumer got every message
once and in order and that the report has its figures (never how fast they are).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lean.histogram import LatencyHistogram
from bench.lean.stamp import EntryCache, payload, read_entry
from bench.lean.tally import Tally
from magnetar.protocol import wire
from magnetar.protocol.entry import prepend_entry_metadata
from magnetar.protocol.headers import encode_headers_and_payload

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_histogram_percentiles_fall_within_one_bucket_of_the_truth():
    h = LatencyHistogram()
    for us in range(1, 100_001):
        h.record(us)
    assert h.count == 100_000 and h.max_us == 100_000 and h.min_us == 1
    for q, truth in ((0.5, 50_000), (0.99, 99_000)):
        assert truth <= h.percentile_us(q) <= truth * 1.05
    assert h.percentile_us(1.0) == 100_000  # capped at the exact max


def test_histograms_merge_through_their_picklable_state():
    a, b = LatencyHistogram(), LatencyHistogram()
    for us in (10, 20, -5):  # a negative latency (coarse clocks) counts as zero
        a.record(us)
    b.record(5000)
    merged = LatencyHistogram.from_state(json.loads(json.dumps(a.to_state())))
    merged.merge(b)
    assert (merged.count, merged.min_us, merged.max_us, merged.total_us) == (4, 0, 5000, 5030)
    assert merged.summary_ms()["max"] == 5.0
    assert LatencyHistogram().summary_ms()["p50"] is None


def test_tally_counts_duplicates_and_gaps_per_consumer():
    tally = Tally(3, expected=3)
    for seq in (0, 1, 2):
        tally.record(0, seq)
    for seq in (0, 0, 1, 2):
        tally.record(1, seq)
    assert tally.record(2, 0) is False and tally.record(2, 2) is True  # 1 skipped
    assert tally.summary() == {
        "consumers": 3,
        "clean": 1,
        "deliveries": 8,
        "missing": 1,
        "duplicates": 1,
        "gaps": 1,
        "incomplete": 0,
    }
    assert tally.complete == 3


def test_entry_times_are_read_from_broker_metadata_and_producer_metadata():
    meta = wire.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1_000)
    stored = encode_headers_and_payload(meta, payload(42, 64))
    with_broker = prepend_entry_metadata(wire.BrokerEntryMetadata(broker_timestamp=1_005, index=3), stored)
    assert tuple(read_entry(memoryview(with_broker))) == (1_005, 1_000, 42)
    assert tuple(read_entry(memoryview(stored))) == (0, 1_000, 42)  # no broker timestamp: 0
    cache = EntryCache()
    assert cache.get(1, 2, memoryview(with_broker)).seq == 42
    assert cache.get(1, 2, memoryview(b"not parsed again")).seq == 42


@pytest.mark.parametrize(("per_connection", "official_first"), [(1, False), (4, True)])
def test_a_few_hundred_lean_consumers_over_two_processes_get_everything_once_in_order(
    tmp_path, per_connection, official_first
):
    out = tmp_path / "lean.json"
    consumers, official, messages = 300, 10, 8
    cmd = [sys.executable, "-m", "bench.lean", "--consumers", str(consumers), "--processes", "2"]
    cmd += ["--official", str(official), "--messages", str(messages), "--rate", "100", "--size", "256"]
    cmd += ["--per-connection", str(per_connection), "--ack-every", "3", "--timeout", "60", "--out", str(out)]
    cmd += ["--official-first"] if official_first else []
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.exists(), f"no JSON report:\n{done.stderr[-5000:]}"
    doc = json.loads(out.read_text())
    assert done.returncode == 0, doc
    assert doc["machine"]["cores"] and doc["settings"]["consumers"] == consumers
    assert doc["delivery"]["every_consumer_got_everything_once_in_order"] is True
    assert doc["delivery"]["deliveries"] == consumers * messages
    lean, slice_ = doc["lean"]["correctness"], doc["official"]["correctness"]
    assert lean == {
        "consumers": consumers - official,
        "clean": consumers - official,
        "deliveries": (consumers - official) * messages,
        "missing": 0,
        "duplicates": 0,
        "gaps": 0,
        "incomplete": 0,
    }
    assert (slice_["consumers"], slice_["clean"], slice_["deliveries"]) == (
        official,
        official,
        official * messages,
    )
    connect = doc["connect"]
    assert (
        connect["failed_consumers"] == 0
        and connect["all_subscribed_s"] >= connect["lean_all_subscribed_s"] > 0
    )
    assert connect["official_joined"] == ("first" if official_first else "last")
    assert [p["kind"] for p in doc["connect"]["per_process"]] == ["lean", "lean", "official"]
    assert all(p["connect_s"] is not None and not p["errors"] for p in doc["connect"]["per_process"])
    assert doc["broker"].keys() >= {"rss_per_consumer_kib", "cpu_us_per_delivery", "peak_rss_kib"}
    # The broker's entry metadata came through: every lean delivery has a broker-timestamp latency.
    assert doc["lean"]["latency_ms"]["from_broker_timestamp"]["count"] == (consumers - official) * messages
    assert doc["official"]["latency_ms"]["from_publish_time"]["count"] == official * messages
    summary = out.with_suffix(".md").read_text()
    assert "broker CPU per delivery" in summary and "official latency" in summary
