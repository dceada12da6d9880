"""A smoke run of the spread benchmark (``bench/broadcast_spread.py``): one topic's broadcast
consumers, one connection each, against 1 and 2 workers.

It checks that every consumer got every message once and in order on each broker, that with two
workers the consumers' connections were served by both, and that the figures and ratios are in the
report; never how fast anything went.
"""

from __future__ import annotations

import json

import pytest

from bench import broadcast_spread

pytestmark = pytest.mark.slow  # slow: two brokers and generator processes


def test_one_topics_consumers_get_everything_from_one_and_two_workers(tmp_path, capsys):
    out = tmp_path / "spread.json"
    args = ["--consumers", "80", "--official", "4", "--messages", "3", "--rate", "10", "--size", "1024"]
    assert broadcast_spread.main([*args, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    one, two = doc["rows"]
    assert (one["workers"], two["workers"]) == (1, 2)
    for row in (one, two):
        assert row["all_once_in_order"] and row["failed_consumers"] == 0, row
        assert row["deliveries"] == row["expected"] == 80 * 3
        # CPU is read in clock ticks (10 ms): a run this small may read none on a quiet machine.
        assert row["cpu_us_per_delivery"] is not None and row["p99_ms"] is not None
    if one["cpu_us_per_delivery"] and two["cpu_us_per_delivery"]:  # a ratio where both read any CPU
        assert one["cpu_ratio"] == 1.0 and "cpu_ratio" in two
    assert one["sockets_per_worker"] is None
    # 80 connections hashed over two workers: each holds a good share of them (besides its listeners).
    sockets = two["sockets_per_worker"]
    assert len(sockets) == 2 and sum(sockets.values()) >= 80 and min(sockets.values()) >= 15, sockets
    assert "| 2 |" in out.with_suffix(".md").read_text()
