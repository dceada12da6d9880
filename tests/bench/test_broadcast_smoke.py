"""A smoke run of the broadcast benchmark (``bench/broadcast.py``): few consumers and messages.

Magnetar's broadcast subscription and its one-subscription-per-consumer run must deliver every
message to every consumer once, in order; the peer's own failures (it runs when ``pulsar-lite``
is installed) are the benchmark's to report, not this test's to judge.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.brokers import peer_installed

pytestmark = pytest.mark.slow  # slow: the broadcast benchmark end to end

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_broadcast_benchmark_runs_and_magnetar_delivers_everything(tmp_path):
    out = tmp_path / "broadcast.json"
    cmd = [sys.executable, "-m", "bench.broadcast", "--consumers", "20", "--messages", "10"]
    cmd += ["--rate", "200", "--clients", "2", "--timeout", "30", "--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert out.exists(), f"no JSON report:\n{done.stderr[-5000:]}"
    doc = json.loads(out.read_text())
    picture = out.with_suffix(".svg").read_text()  # the latency distribution, drawn beside --out
    assert "magnetar-broadcast" in picture and "magnetar-subscriptions" in picture
    names = [r["name"] for r in doc["results"]]
    expected = ["magnetar-broadcast", "magnetar-subscriptions"]
    assert names == expected + (["pulsar-lite-subscriptions"] if peer_installed() else [])
    assert doc["machine"]["cores"] and doc["settings"]["consumers"] == 20
    for result in doc["results"]:
        if result["name"] in expected:
            assert result["deliveries"] == 20 * 10, result
            assert (result["missing"], result["duplicates"], result["out_of_order"]) == (0, 0, 0), result
            assert result["connect_s"] > 0 and result["latency_ms"]["p50"] > 0, result
