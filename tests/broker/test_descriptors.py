"""File descriptor bookkeeping: the reserve check and the rate-limited log line."""

from __future__ import annotations

import logging
import resource

from magnetar.broker import descriptors


def test_a_descriptor_near_the_soft_limit_is_in_the_reserve():
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert descriptors.in_reserve(soft - 1)
    assert descriptors.in_reserve(soft - descriptors.RESERVE)
    assert not descriptors.in_reserve(soft - descriptors.RESERVE - 1)
    assert not descriptors.in_reserve(soft - descriptors.RESERVE, descriptors.CONNECTION_RESERVE)


def test_refusals_are_all_counted_but_logged_once_a_minute(caplog):
    clock = [1000.0]
    exhaustion = descriptors.Exhaustion(clock=lambda: clock[0])
    with caplog.at_level(logging.ERROR, logger=descriptors.__name__):
        for _ in range(5):
            exhaustion.refused("topic", "t")
        exhaustion.refused("connection", "c")
        clock[0] += descriptors.LOG_INTERVAL_S
        exhaustion.refused("subscription", "s")
    assert exhaustion.counts == {"connection": 1, "topic": 5, "subscription": 1, "read": 0, "write": 0}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "refused a topic (t); 1 refusal(s)" in lines[0]
    assert "refused a subscription (s); 6 refusal(s)" in lines[1]  # the 5 unlogged ones and itself


def test_ledger_files_take_at_most_half_the_descriptor_limit(caplog):
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    with caplog.at_level(logging.WARNING, logger=descriptors.__name__):
        assert descriptors.ledger_file_limit(64) == min(64, soft // 2)
        assert not caplog.records or soft // 2 < 64
        assert descriptors.ledger_file_limit(soft) == soft // 2
    assert "more than half the file descriptor limit" in caplog.records[-1].getMessage()
