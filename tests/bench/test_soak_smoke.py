"""A smoke run of the soak (``bench/soak.py``): 15 s of traffic, a kill -9 or more (the first
comes 1.5 to 4.5 s in), no Spark and no loop-mounted disk (those need minutes and root); every
receipted message must arrive."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # slow: a broker killed and restarted under traffic for 15 s

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_soak_runs_kills_the_broker_and_loses_nothing(tmp_path):
    out = tmp_path / "soak.json"
    cmd = [sys.executable, "-m", "bench.soak", "--minutes", "0.25", "--kill-every", "3"]
    cmd += ["--no-spark", "--no-full-disk", "--broadcast-consumers", "2", "--drain-s", "90"]
    cmd += ["--workdir", str(tmp_path / "work"), "--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert out.exists(), f"no JSON report:\n{done.stderr[-5000:]}"
    doc = json.loads(out.read_text())
    assert doc["kills"] >= 1 and doc["drained"], doc
    subscriptions = doc["subscriptions"]
    assert set(subscriptions) == {
        "alerts/fleet/vehicle-0",
        "alerts/fleet/vehicle-1",
        "batched/work",
        "chunked/whole",
        "keyed/by-key",
    }
    for name, sub in subscriptions.items():
        said = f"{name}: {json.dumps(sub)}\nkills: {doc['kills']}; traces: {json.dumps(doc.get('traces'))}"
        assert sub["receipted"] > 0 and sub["missing"] == 0 and sub["damaged"] == 0, said
        assert sub["again_after_ack_violations"] == 0, said
    assert doc["ok"] and done.returncode == 0, done.stderr[-3000:]
