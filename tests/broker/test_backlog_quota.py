"""Backlog quota rules without a broker: parsing, which quota applies, when one is exceeded."""

from __future__ import annotations

import pytest

from magnetar.broker import backlog_quota as bq
from magnetar.broker.config import BrokerConfig


def test_quotas_parse_pulsars_json_and_refuse_anything_else():
    quota = bq.BacklogQuota.from_json({"limitSize": 1024, "limitTime": -1, "policy": "producer_exception"})
    assert quota == bq.BacklogQuota(1024, -1, bq.EXCEPTION)
    assert bq.BacklogQuota.from_json({"limit": 10}) == bq.BacklogQuota(10, -1, bq.HOLD)  # the old field name
    assert bq.BacklogQuota.from_json(quota.to_json()) == quota
    for bad in ({"policy": "drop_everything"}, {"limitSize": "1k"}, {"limitTime": -2}, [1]):
        with pytest.raises(ValueError):
            bq.BacklogQuota.from_json(bad)


def test_a_namespace_quota_replaces_the_default_of_its_kind_only():
    defaults = BrokerConfig(
        backlog_quota_default_limit_bytes=100, backlog_quota_default_limit_seconds=60
    ).default_backlog_quotas()
    assert defaults[bq.SIZE] == bq.BacklogQuota(limit_size=100) and defaults[bq.AGE] == bq.BacklogQuota(
        limit_time=60
    )
    quotas = bq.effective_quotas({bq.AGE: {"limitTime": 5, "policy": bq.EVICTION}}, defaults)
    assert quotas[bq.SIZE] == defaults[bq.SIZE]
    assert quotas[bq.AGE] == bq.BacklogQuota(limit_time=5, policy=bq.EVICTION)
    assert bq.effective_quotas(None, defaults) == defaults


def test_exceeded_checks_size_before_age_and_ignores_no_limit():
    quotas = {
        bq.SIZE: bq.BacklogQuota(limit_size=100),
        bq.AGE: bq.BacklogQuota(limit_time=10, policy=bq.EVICTION),
    }
    assert bq.exceeded(quotas, 100, 10.0) is None  # at the limits is within them
    assert bq.exceeded(quotas, 101, 11.0) == (bq.SIZE, quotas[bq.SIZE])
    assert bq.exceeded(quotas, 50, 11.0) == (bq.AGE, quotas[bq.AGE])
    assert bq.exceeded(quotas, 50, None) is None  # no backlog: no age
    unlimited = {bq.SIZE: bq.BacklogQuota(), bq.AGE: bq.BacklogQuota()}
    assert bq.exceeded(unlimited, 10**12, 10.0**9) is None


def test_the_broker_refuses_bad_defaults():
    for bad in (
        {"backlog_quota_default_retention_policy": "nope"},
        {"backlog_quota_default_limit_bytes": -5},
        {"backlog_quota_check_interval_seconds": 0},
    ):
        with pytest.raises(ValueError):
            BrokerConfig(**bad).validate()
