"""A smoke run of the replication benchmark (``bench/replication.py``): few messages, both centres.

Every message produced at the edge must reach each centre, in order; pulsar-lite's repeated
deliveries to a live consumer are counted (``redelivered``), not judged here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # slow: the replication benchmark on Magnetar and pulsar-lite

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_replication_benchmark_runs_into_magnetar_and_pulsar_lite(tmp_path):
    out = tmp_path / "replication.json"
    cmd = [sys.executable, "-m", "bench.replication", "--scale", "0.01", "--latency-messages", "20"]
    cmd += ["--timeout", "30", "--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-5000:]
    doc = json.loads(out.read_text())
    assert doc["machine"]["cores"] and doc["pulsar_lite"]
    runs = [(r["centre"], r["scenario"]) for r in doc["results"]]
    assert runs == [(c, s) for c in ("magnetar", "pulsar-lite") for s in ("100B-batched", "10KB")]
    for result in doc["results"]:
        for phase, messages in (
            ("throughput", {"100B-batched": 500, "10KB": 50}[result["scenario"]]),
            ("at_rate", 20),
        ):
            figures = result[phase]
            assert (figures["received"], figures["missing"], figures["gaps"]) == (messages, 0, 0), result
            assert figures["replication_msg_s"] > 0 and figures["latency_ms"]["p50"] > 0, result
