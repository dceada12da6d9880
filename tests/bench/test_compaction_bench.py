"""A smoke run of the compaction benchmark (``bench/compaction.py``): a few thousand messages over a
hundred keys. It checks that every figure is measured and that the compacted view the benchmark
read was right (one message per key, each key's last), never how fast anything was."""

from __future__ import annotations

import json

import pytest

from bench import compaction

pytestmark = pytest.mark.slow  # broker processes, two fills, three compactions: a few seconds


def test_the_compaction_benchmark_measures_every_figure(tmp_path, capsys):
    out = tmp_path / "compaction.json"
    args = ["--messages", "2000", "--keys", "100", "--latency-s", "0.2", "--latency-rate", "200"]
    args += ["--latency-rounds", "1"]
    assert compaction.main([*args, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == doc
    assert doc["problems"] == []
    assert doc["compaction"]["kept_messages"] == 100 and doc["compaction"]["messages_per_s"] > 0
    assert doc["compaction"]["stored_bytes"] > 2000 * 100 and doc["compaction"]["compacted_ledger_bytes"] > 0
    assert doc["reads"]["compacted"]["messages"] == 100 and doc["reads"]["full"]["messages"] == 2000
    for name in compaction.YIELDS:  # side by side: the compactor yielding the GIL, and not
        (latency,) = doc["produce_latency_ms"][name]
        assert latency["compaction_seconds"] > 0, name
        for phase in compaction.PHASES:
            assert latency[phase]["n"] > 0, (name, phase)  # the probe sent in every phase
            assert 0 < latency[phase]["p50"] <= latency[phase]["p99"] <= latency[phase]["max"], (name, phase)


def test_a_wrong_compacted_view_is_a_problem_named():
    class Message:
        def __init__(self, key: str, seq: int) -> None:
            self._key, self._data = key, compaction.payload(seq, 20)

        def partition_key(self) -> str:
            return self._key

        def data(self) -> bytes:
            return self._data

    last = {"a": 5, "b": 7}
    assert compaction._check_view([Message("a", 5), Message("b", 7)], last) == []
    assert compaction._check_view([Message("a", 5), Message("b", 6)], last) == ["b: 6 instead of 7"]
    assert compaction._check_view([Message("a", 5)], last) == ["b: None instead of 7"]
