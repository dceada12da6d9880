"""A smoke run of the tiered-storage benchmark (``bench/offload.py``): few messages, small ledgers,
both drivers (the filesystem and the S3 server), every measurement reported."""

from __future__ import annotations

import json

import pytest

from bench import offload

pytestmark = pytest.mark.slow  # slow: two brokers, each restarted per round, and an S3 server


def test_the_offload_benchmark_reports_each_driver_side_by_side(tmp_path, capsys):
    out = tmp_path / "offload.json"
    args = ["--messages", "300", "--ledger-bytes", "65536", "--repeats", "2"]
    assert offload.main([*args, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == doc
    assert [r["driver"] for r in doc["results"]] == ["filesystem", "s3"]
    for result in doc["results"]:
        offloaded = result["offload"]
        assert offloaded["ledgers"]["low"] >= 4 and offloaded["mb_s"]["low"] > 0, result
        for read in ("local_read", "cold_read", "warm_read"):
            rate, first, seconds = (result[read][key] for key in ("msg_s", "first_message_ms", "seconds"))
            assert 0 < rate["low"] <= rate["median"] <= rate["high"], result
            assert 0 < first["median"] < seconds["median"] * 1000, result
    assert set(doc["cold_vs_local_msg_s"]) == {"filesystem", "s3"} and doc["machine"]["cores"]
