"""A smoke run of the workers benchmark (``bench/workers.py``): 1 and 2 workers, a second each.

It checks that every message produced was consumed on each broker and that the ratios are
reported against the first, never how fast anything went.
"""

from __future__ import annotations

import json

import pytest

from bench import workers

pytestmark = pytest.mark.slow  # slow: two brokers and client processes


def test_every_message_produced_is_consumed_with_one_and_two_workers(tmp_path, capsys):
    out = tmp_path / "workers.json"
    args = ["--seconds", "1", "--producers", "1", "--consumers", "1", "--out", str(out)]
    assert workers.main(args) == 0
    doc = json.loads(out.read_text())
    assert [r["workers"] for r in doc["results"]] == [1, 2]
    for result in doc["results"]:
        assert result["produced"] > 0 and result["received"] == result["produced"], result
    assert doc["results"][0]["produce_ratio"] == 1.0 and "consume_ratio" in doc["results"][1]
    assert doc["machine"]["cores"]
    picture = out.with_suffix(".svg").read_text()  # drawn beside --out
    assert "produce" in picture and "consume" in picture and picture.startswith("<svg")
