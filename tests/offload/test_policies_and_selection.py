"""Which ledgers an offload takes and which policies apply (pure logic, no files)."""

from __future__ import annotations

import pytest

from magnetar.broker.offload_policies import (
    DELETION_LAG,
    THRESHOLD,
    THRESHOLD_SECONDS,
    OffloadPolicies,
    applied,
    checked,
)
from magnetar.cli.admin.offload import first_ledger_within
from magnetar.storage.ledger_info import OFFLOADED, LedgerInfo, Offload
from magnetar.storage.offload_selection import before_ledger, over_threshold, past_deletion_lag


def _ledgers(*sizes: int, offloaded: int = 0, closed_at: tuple[float, ...] = ()) -> list[LedgerInfo]:
    out = []
    for n, size in enumerate(sizes):
        closed = n < len(sizes) - 1
        offload = Offload(f"k{n}", OFFLOADED, size, 0, 100.0) if n < offloaded else None
        when = (closed_at[n] if n < len(closed_at) else 1.0) if closed else None
        out.append(LedgerInfo(n, 1, size, 0.0, closed, when, offload))
    return out


def test_the_threshold_keeps_the_newest_bytes_local():
    ledgers = _ledgers(100, 100, 100, 50)  # the last is open
    assert [i.ledger_id for i in over_threshold(ledgers, -1)] == []
    assert [i.ledger_id for i in over_threshold(ledgers, 0)] == [0, 1, 2]  # as soon as closed
    assert [i.ledger_id for i in over_threshold(ledgers, 150)] == [0, 1]  # 50 + 100 stay within 150
    assert [i.ledger_id for i in over_threshold(ledgers, 250)] == [0]
    assert [i.ledger_id for i in over_threshold(ledgers, 1000)] == []
    assert [i.ledger_id for i in over_threshold(_ledgers(100, 100, 100, 50, offloaded=1), 0)] == [1, 2]


def test_the_age_threshold_takes_the_ledgers_closed_that_long_ago_whatever_their_size():
    ledgers = _ledgers(100, 100, 100, 50, closed_at=(1000.0, 1500.0, 1900.0))  # the last is open
    ids = [i.ledger_id for i in over_threshold(ledgers, -1, 500, now=2000.0)]
    assert ids == [0, 1]  # closed 1000 and 500 s ago; the one closed 100 s ago stays
    assert [i.ledger_id for i in over_threshold(ledgers, -1, 0, now=2000.0)] == [0, 1, 2]
    assert over_threshold(ledgers, -1, -1, now=2000.0) == []
    assert over_threshold(ledgers, -1, 5000, now=2000.0) == []
    # either rule is enough (Pulsar's): by size 0 and 1 go, by age 0
    assert [i.ledger_id for i in over_threshold(ledgers, 150, 1000, now=2000.0)] == [0, 1]
    assert [i.ledger_id for i in over_threshold(ledgers, 1000, 100, now=2000.0)] == [0, 1, 2]
    # what is offloaded already, or open, is never taken
    offloaded = _ledgers(100, 100, 50, offloaded=1, closed_at=(1.0, 2.0))
    assert [i.ledger_id for i in over_threshold(offloaded, -1, 0, now=10.0)] == [1]


def test_an_offload_up_to_a_message_takes_the_ledgers_before_its_own():
    ledgers = _ledgers(100, 100, 100, 50, offloaded=1)
    assert [i.ledger_id for i in before_ledger(ledgers, 2)] == [1]
    assert [i.ledger_id for i in before_ledger(ledgers, 3)] == [1, 2]


def test_local_copies_go_once_the_lag_has_passed():
    ledgers = _ledgers(10, 10, 10, offloaded=2)  # offloaded at t=100
    assert past_deletion_lag(ledgers, 50, now=120) == []
    assert [i.ledger_id for i in past_deletion_lag(ledgers, 20, now=120)] == [0, 1]
    assert past_deletion_lag(ledgers, -1, now=10_000) == []


def test_pulsar_admin_keeps_at_most_the_size_given():
    ledgers = [{"ledgerId": n, "size": 100} for n in range(4)]
    assert first_ledger_within(ledgers, 1000) is None
    assert first_ledger_within(ledgers, 250) == 2  # 0 and 1 go, 2 and 3 (200 bytes) stay
    assert first_ledger_within(ledgers, 0) == 3


def test_topic_then_namespace_then_broker_field_by_field():
    broker = OffloadPolicies(-1, 1000)
    assert applied(None, None, None, None, broker) == broker
    assert applied(None, None, 10, None, broker) == OffloadPolicies(10, 1000)
    assert applied(None, {THRESHOLD: 20}, 10, None, broker) == OffloadPolicies(20, 1000)
    assert applied({DELETION_LAG: 5}, {THRESHOLD: 20}, 10, 7, broker) == OffloadPolicies(20, 5)
    assert applied({THRESHOLD: -1}, {THRESHOLD: 20}, None, None, broker).threshold_bytes == -1
    # the age threshold: the namespace's offloadThresholdInSeconds, its policies, the topic's
    aged = OffloadPolicies(-1, 1000, 3600)
    assert applied(None, None, None, None, aged).threshold_seconds == 3600
    assert applied(None, None, None, None, aged, 60).threshold_seconds == 60
    assert applied(None, {THRESHOLD_SECONDS: 30}, None, None, aged, 60).threshold_seconds == 30
    assert (
        applied({THRESHOLD_SECONDS: -1}, {THRESHOLD_SECONDS: 30}, None, None, aged, 60).threshold_seconds
        == -1
    )
    assert (
        applied(None, None, None, None, aged).automatic
        and not applied(None, None, None, None, broker).automatic
    )
    assert aged.to_json()[THRESHOLD_SECONDS] == 3600


def test_policies_in_pulsars_json_are_checked():
    assert checked({THRESHOLD: 0, "managedLedgerOffloadDriver": "AWS-S3"}, "aws-s3") == {
        THRESHOLD: 0,
        "managedLedgerOffloadDriver": "AWS-S3",
    }
    with pytest.raises(ValueError, match="own store"):
        checked({"managedLedgerOffloadDriver": "google-cloud-storage"}, "aws-s3")
    with pytest.raises(ValueError, match="unknown"):
        checked({"offloadEverything": True}, None)
    with pytest.raises(ValueError, match=THRESHOLD):
        checked({THRESHOLD: -2}, None)
    with pytest.raises(ValueError, match="JSON object"):
        checked([1], None)
