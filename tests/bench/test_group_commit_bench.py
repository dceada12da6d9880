"""A smoke run of the group-commit benchmark (``bench/group_commit.py``): few entries, few bursts."""

from __future__ import annotations

import json

from bench import group_commit


def test_the_group_commit_benchmark_reports_each_measurement(tmp_path, capsys):
    out = tmp_path / "group-commit.json"
    args = ["--lone", "5", "--burst", "20", "--repeats", "3", "--interval-ms", "5"]
    assert group_commit.main([*args, "--data-dir", str(tmp_path / "data"), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == doc
    assert doc["lone"]["latency_us"]["n"] == 5 and doc["lone"]["latency_us"]["p50"] > 0
    for name in ("burst_always", "burst_interval"):
        rounds = doc[name]["rounds"]
        assert rounds["n"] == 3 and 1 <= rounds["low"] <= rounds["high"] <= 20, doc[name]
    assert doc["burst_interval"]["ms"]["low"] >= 5  # the interval policy waits out its interval
