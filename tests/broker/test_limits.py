"""The limits' checks on their own (broker/limits.py): counts in, Pulsar's error out, no network."""

from __future__ import annotations

import logging

import pytest

from magnetar.broker import limits
from magnetar.broker.config import BrokerConfig
from magnetar.broker.limits import ConnectionCounter, LimitReached, Limits, Refusals
from magnetar.protocol import wire


def make(**settings) -> Limits:
    return Limits(BrokerConfig(**settings), clock=lambda: 0.0)


def test_zero_is_no_limit_and_a_limit_leaves_room_for_exactly_that_many():
    assert not limits.reached(10**6, 0)
    assert not limits.reached(2, 3)
    assert limits.reached(3, 3)


def test_a_namespace_policy_overrides_the_broker_setting_even_with_zero():
    assert limits.effective(5, None) == 5
    assert limits.effective(5, 2) == 2
    assert limits.effective(5, 0) == 0  # the namespace lifts the broker's limit


def test_the_per_ip_counter_admits_up_to_each_limit_and_forgets_an_ip_with_nothing_open():
    counter = ConnectionCounter(max_connections=3, max_per_ip=2)
    assert counter.admit("10.0.0.1") is None
    assert counter.admit("10.0.0.1") is None
    assert counter.admit("10.0.0.1") == limits.CONNECTIONS_PER_IP  # refused ones are not counted
    assert counter.admit("10.0.0.2") is None
    assert counter.admit("10.0.0.3") == limits.CONNECTIONS
    assert counter.total == 3
    counter.release("10.0.0.1")
    assert counter.admit("10.0.0.3") is None
    for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        counter.release(ip)
    assert counter.total == 0 and counter.per_ip == {}


def test_connections_are_not_counted_while_both_limits_are_off():
    lim = make()
    assert not lim.connections.enabled
    for _ in range(5):
        assert lim.admit_connection("10.0.0.1") is None
    assert lim.connections.total == 0 and lim.connections.per_ip == {}


def test_a_refused_connection_gets_pulsars_not_allowed_error_and_is_counted():
    lim = make(broker_max_connections_per_ip=1)
    assert lim.admit_connection("10.0.0.1") is None
    refused = lim.admit_connection("10.0.0.1")
    assert refused is not None and refused.code == wire.NotAllowedError
    assert "Reached the maximum number of connections on address 10.0.0.1" in str(refused)
    assert lim.admit_connection("10.0.0.2") is None  # another address is not affected
    assert lim.refusals.counts[limits.CONNECTIONS_PER_IP] == 1


def test_producers_per_topic_and_per_connection_are_producer_busy():
    lim = make(max_producers_per_topic=2, max_producers_per_connection=3)
    lim.check_producer("t", on_topic=1, on_connection=2, namespace_max=None, remote="r")
    with pytest.raises(LimitReached) as topic_full:
        lim.check_producer("t", on_topic=2, on_connection=0, namespace_max=None, remote="r")
    assert topic_full.value.code == wire.ProducerBusy
    assert "Topic reached max producers limit" in str(topic_full.value)
    with pytest.raises(LimitReached) as connection_full:
        lim.check_producer("t", on_topic=0, on_connection=3, namespace_max=None, remote="r")
    assert connection_full.value.code == wire.ProducerBusy
    assert connection_full.value.limit == limits.PRODUCERS_PER_CONNECTION
    lim.check_producer("t", on_topic=2, on_connection=0, namespace_max=5, remote="r")  # namespace allows more
    assert lim.refusals.counts[limits.PRODUCERS_PER_TOPIC] == 1


def test_consumers_per_topic_subscription_and_connection_are_consumer_busy():
    lim = make(max_consumers_per_topic=4, max_consumers_per_subscription=2, max_consumers_per_connection=5)
    lim.check_consumer("t", "s", (lambda: 3, 1, 4), (None, None), "r")
    cases = [
        ((lambda: 4, 0, 0), (None, None), "Topic reached max consumers limit", limits.CONSUMERS_PER_TOPIC),
        (
            (lambda: 2, 2, 0),
            (None, None),
            "Subscription reached max consumers limit",
            limits.CONSUMERS_PER_SUBSCRIPTION,
        ),
        (
            (lambda: 0, 0, 5),
            (None, None),
            "Connection reached max consumers limit",
            limits.CONSUMERS_PER_CONNECTION,
        ),
        ((lambda: 1, 1, 0), (1, None), "Topic reached max consumers limit", limits.CONSUMERS_PER_TOPIC),
    ]
    for counts, namespace_max, message, limit in cases:
        with pytest.raises(LimitReached) as refused:
            lim.check_consumer("t", "s", counts, namespace_max, "r")
        assert refused.value.code == wire.ConsumerBusy and refused.value.limit == limit
        assert message in str(refused.value)
    lim.check_consumer("t", "s", (lambda: 9, 9, 0), (0, 0), "r")  # the namespace lifts both


def test_consumers_of_a_topic_are_not_counted_unless_limited():
    def count() -> int:
        raise AssertionError("counted without a limit")

    make().check_consumer("t", "s", (count, 0, 0), (None, None), "r")


def test_topics_per_namespace_counts_partitions_and_is_not_allowed():
    lim = make(max_topics_per_namespace=5)
    lim.check_topics("public/default", existing=4, new=1, namespace_max=None)
    with pytest.raises(LimitReached) as refused:
        lim.check_topics("public/default", existing=2, new=4, namespace_max=None)  # a topic of 4 partitions
    assert refused.value.code == wire.NotAllowedError
    assert "Exceed maximum number of topics in namespace" in str(refused.value)
    assert lim.topics_limited(None) and not lim.topics_limited(0) and not make().topics_limited(None)


def test_refusals_are_all_counted_but_logged_once_a_minute_per_limit(caplog):
    now = [0.0]
    refusals = Refusals(clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger=limits.__name__):
        for _ in range(5):
            refusals.refused(limits.PRODUCERS_PER_TOPIC, "a producer on t")
        refusals.refused(limits.CONNECTIONS, "a connection from 10.0.0.1")  # another limit: its own line
        now[0] = limits.LOG_INTERVAL_S
        refusals.refused(limits.PRODUCERS_PER_TOPIC, "a producer on t")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0].startswith("max_producers_per_topic reached")
    assert "5 refusal(s)" in lines[2]  # the four not logged and this one
    assert refusals.counts[limits.PRODUCERS_PER_TOPIC] == 6 and refusals.counts[limits.CONNECTIONS] == 1


def test_limits_are_off_by_default_and_negative_values_are_refused():
    config = BrokerConfig()
    assert all(getattr(config, name) == 0 for name in limits.ALL)
    with pytest.raises(ValueError, match="max_producers_per_topic"):
        BrokerConfig.load(max_producers_per_topic=-1)
