"""Traffic rates: the average over each stats interval, worked out from plain counters."""

from __future__ import annotations

import pytest

from magnetar.broker.traffic import Traffic


def test_rates_are_the_counts_of_the_interval_just_ended_over_its_length():
    traffic = Traffic(now=100.0)
    traffic.messages_in, traffic.bytes_in = 30, 3_000
    traffic.messages_out, traffic.bytes_out = 60, 6_600
    traffic.update_rates(102.0)
    assert (traffic.rate_in, traffic.throughput_in) == (15.0, 1_500.0)
    assert (traffic.rate_out, traffic.throughput_out) == (30.0, 3_300.0)
    assert traffic.average_message_size_in == 100.0
    # The next interval counts only what came since.
    traffic.messages_in, traffic.bytes_in = 40, 5_000
    traffic.update_rates(106.0)
    assert (traffic.rate_in, traffic.throughput_in) == (2.5, 500.0)
    assert (traffic.rate_out, traffic.throughput_out) == (0.0, 0.0)
    assert traffic.average_message_size_in == 200.0
    # The counters themselves are untouched: they are the totals since the start.
    assert (traffic.messages_in, traffic.bytes_in, traffic.messages_out) == (40, 5_000, 60)


def test_an_idle_interval_brings_the_rates_to_zero():
    traffic = Traffic(now=0.0)
    traffic.messages_in, traffic.bytes_in = 10, 1_000
    traffic.update_rates(1.0)
    traffic.update_rates(2.0)
    assert (traffic.rate_in, traffic.throughput_in, traffic.average_message_size_in) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("now", [5.0, 4.0])
def test_an_update_without_time_passing_keeps_the_last_rates(now):
    traffic = Traffic(now=0.0)
    traffic.messages_in = 50
    traffic.update_rates(5.0)
    traffic.messages_in = 80
    traffic.update_rates(now)  # the same instant (or a clock that went back): no interval ended
    assert traffic.rate_in == 10.0
    traffic.update_rates(8.0)
    assert traffic.rate_in == 10.0  # the 30 since the update at 5.0, over 3 seconds


def test_the_drop_rate_is_the_dropped_messages_over_the_interval():
    traffic = Traffic(now=0.0)
    traffic.messages_dropped = 30
    traffic.update_rates(2.0)
    assert traffic.drop_rate == 15.0
    traffic.update_rates(4.0)
    assert traffic.drop_rate == 0.0
