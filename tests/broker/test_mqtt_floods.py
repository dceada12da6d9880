"""The MQTT port's per-address CONNECT rate (broker/mqtt/floods.py), without a network."""

from __future__ import annotations

from magnetar.broker.mqtt import floods
from magnetar.broker.mqtt.floods import ConnectRate


def test_a_burst_then_the_rate_per_address():
    rate = ConnectRate(5)
    assert [rate.admit("10.0.0.1", 0.0) for _ in range(6)] == [True] * 5 + [False]
    assert rate.admit("10.0.0.2", 0.0)  # another address has its own bucket
    assert not rate.admit("10.0.0.1", 0.1)  # half a CONNECT earned
    assert rate.admit("10.0.0.1", 0.3) and not rate.admit("10.0.0.1", 0.3)
    assert rate.refused == 3


def test_off_and_below_one_a_second():
    off = ConnectRate(0)
    assert all(off.admit("a", 0.0) for _ in range(1000)) and len(off) == 0
    slow = ConnectRate(0.5)  # one at once, then one every two seconds
    assert slow.admit("a", 0.0) and not slow.admit("a", 1.0) and slow.admit("a", 2.0)


def test_buckets_that_refilled_are_forgotten(monkeypatch):
    monkeypatch.setattr(floods, "MAX_ADDRESSES", 10)
    rate = ConnectRate(1)
    for i in range(10):
        rate.admit(f"10.0.0.{i}", 0.0)
    assert len(rate) == 10
    rate.admit("10.0.1.1", 5.0)  # the eleventh: those full again since go
    assert len(rate) == 1
