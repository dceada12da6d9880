"""A smoke run of the MQTT benchmark (``bench/mqtt.py --smoke``): a few hundred messages and twenty
subscribers on Magnetar and, where it is installed, Mosquitto. Every scenario must run and deliver
everything, and Magnetar must still have every message it acknowledged after kill -9; the
figures themselves are the benchmark's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # slow: two brokers, each started twice

REPO_ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["qos0", "qos1", "qos1-sync", "fanout-20", "kill9"]


def test_the_mqtt_benchmark_runs_on_both_brokers(tmp_path):
    out = tmp_path / "mqtt.json"
    cmd = [sys.executable, "-m", "bench.mqtt", "--smoke", "--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert out.exists(), f"no JSON report:\n{done.stderr[-5000:]}"
    doc = json.loads(out.read_text())
    assert doc["machine"]["cores"] and doc["settings"]["fanout"] == [20]
    results = {r["name"]: r for r in doc["results"]}
    mosquitto = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin")
    assert set(results) == {"magnetar", "mosquitto"}
    ran = ["magnetar"] + (["mosquitto"] if mosquitto else [])
    for name in ran:
        scenarios = results[name]["scenarios"]
        assert list(scenarios) == SCENARIOS, scenarios
        for scenario in SCENARIOS[:-1]:
            figures = scenarios[scenario]
            assert "error" not in figures, (name, scenario, figures)
            assert (figures["missing"], figures["duplicates"]) == (0, 0), (name, scenario, figures)
            assert figures["latency_ms"]["p50"] > 0
        assert scenarios["qos1"]["acknowledged"] == 300 and scenarios["qos1"]["puback_ms"]["p99"] > 0
        assert scenarios["fanout-20"]["deliveries"] == 20 * scenarios["fanout-20"]["messages"]
        assert scenarios["kill9"]["acknowledged"] == 50
    assert results["magnetar"]["scenarios"]["kill9"]["after_kill9_stored"] == 50  # fsynced before PUBACK
