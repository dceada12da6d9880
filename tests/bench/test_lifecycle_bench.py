"""A smoke run of the lifecycle benchmark (``bench/lifecycle.py``): a few rounds on each broker.

It checks that every step ran every round on Magnetar and on the peer, never how long it took.
"""

from __future__ import annotations

import json

from bench import lifecycle
from bench.brokers import PEER, peer_installed


def test_every_step_is_measured_every_round_on_each_broker(tmp_path, capsys):
    out = tmp_path / "lifecycle.json"
    assert lifecycle.main(["--rounds", "3", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == doc
    assert [r["broker"] for r in doc["results"]] == ["magnetar-fsync"] + ([PEER] if peer_installed() else [])
    for result in doc["results"]:
        assert set(result["steps_ms"]) == set(lifecycle.STEPS)
        for step, figures in result["steps_ms"].items():
            assert figures["n"] == 3, (result["broker"], step)
            assert 0 < figures["p50"] <= figures["p99"] <= figures["max"], (result["broker"], step, figures)


def test_percentiles_of_a_known_sample():
    figures = lifecycle.percentiles([float(v) for v in range(1, 101)])
    assert figures == {"p50": 50.5, "p99": 99.0, "max": 100.0, "n": 100}
