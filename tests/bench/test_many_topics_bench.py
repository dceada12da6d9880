"""A smoke run of the many-topics benchmark (``bench/many_topics.py``): a few topics on Magnetar,
alone and with 2 worker processes, each phase without an error, the restart's time and CPU
seconds to listening reported; never how fast anything went."""

from __future__ import annotations

import json

import pytest

from bench import many_topics

pytestmark = pytest.mark.slow  # slow: three broker starts and client processes


def test_every_topic_is_made_read_and_found_again_after_a_restart_alone_and_with_two_workers(tmp_path):
    out = tmp_path / "many_topics.json"
    args = ["--topics", "12", "--clients", "1", "--threads", "4", "--idle", "0", "--workers", "2"]
    assert many_topics.main([*args, "--only", "magnetar-fsync", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["broker"] for r in doc["results"]] == ["magnetar-fsync", "magnetar-workers"]
    for result in doc["results"]:
        assert result["produce"]["errors"] == 0 and result["consume"]["errors"] == 0, result
        restart = result["restart"]
        assert restart["to_listening_s"] > 0 and restart["cpu_s_at_listening"] > 0, restart
        assert restart["first_message_after_listening_s"] > 0, restart
    assert doc["topics"] == 12 and doc["machine"]["cores"]
