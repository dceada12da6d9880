"""A smoke run of the WebSocket benchmark (``bench/websocket.py``): a few hundred messages a phase.

It checks that every phase stored or drained every message and that the WebSocket / official
ratios are reported, never how fast anything went.
"""

from __future__ import annotations

import json

import pytest

from bench import websocket

pytestmark = pytest.mark.slow  # slow: a broker, and every phase end to end


def test_every_phase_moves_every_message_and_the_ratios_are_reported(tmp_path, capsys):
    out = tmp_path / "websocket.json"
    args = ["--messages", "300", "--repeat", "1", "--ws-batch", "10", "--rest-batch", "50", "--out", str(out)]
    assert websocket.main(args) == 0
    doc = json.loads(out.read_text())
    phases = [r["phase"] for r in doc["runs"]]
    assert phases == [
        "official-produce",
        "ws-produce",
        "official-consume",
        "ws-consume",
        "official-produce-batched",
        "ws-produce-batched",
        "rest-produce",
    ]
    for run in doc["runs"]:
        assert run["messages"] == run["expected"] == 300, run
        assert run["msg_s"] > 0 and run["broker_cpu_us_per_msg"] >= 0, run
    assert set(doc["ratios"]) == {
        "ws-produce / official-produce",
        "ws-consume / official-consume",
        "ws-produce-batched / official-produce-batched",
        "rest-produce / official-produce",
    }
    assert doc["failed"] == [] and doc["machine"]["cores"]
