"""The broadcast lag policy: its threshold arithmetic as pure functions, then the sweep on a real
topic and real storage with recording connections (tests/interop/test_broadcast_ops.py drives it
through a broker process and the official client)."""

from __future__ import annotations

import pytest

from magnetar.broker.dispatchers.broadcast_lag import (
    LagLimits,
    Threshold,
    age_cut,
    count_cut,
    past,
    strictest,
    sweep_subscription,
    threshold_for,
)
from magnetar.broker.housekeeping import sweep_broadcast_lag
from magnetar.storage.entry import EntryData
from magnetar.storage.errors import EntryNotFoundError
from magnetar.storage.position import Position

from .entry_harness import message
from .recording import ack
from .test_broadcast_dispatch import join, publish_numbered, subscribe_many

BASE_MS = 1_700_000_000_000


def P(entry: int, ledger: int = 1) -> Position:
    return Position(ledger, entry)


# -- pure ------------------------------------------------------------------------------------------


def test_the_count_cut_is_max_messages_before_the_last_entry():
    assert count_cut(10, 3) == 6  # ordinals 7, 8, 9 after it: a mark-delete there is 3 behind
    assert count_cut(10, 9) == 0
    assert count_cut(10, 10) is None  # nobody can have more than 10 of 10 left
    assert count_cut(0, 1) is None


def test_the_age_cut_is_the_entry_before_the_first_young_one():
    assert age_cut(5) == 4
    assert age_cut(0) is None  # every entry is within the limit


def test_the_strictest_threshold_is_the_highest():
    low, high = Threshold(P(3), "count"), Threshold(P(8), "age")
    assert strictest(low, high) is high and strictest(high, None, low) is high
    assert strictest(None, None) is None


def test_past_compares_each_mark_delete_with_the_threshold_only():
    cursors = [("a", P(2)), ("b", P(5)), ("c", P(6)), ("d", P(0, ledger=2))]
    assert past(cursors, P(5)) == ["a"]  # at the threshold is not past it
    assert past(cursors, P(0, ledger=2)) == ["a", "b", "c"]


def test_limits_are_off_by_default():
    assert not LagLimits().enabled
    assert LagLimits(max_messages=1).enabled and LagLimits(max_seconds=0.5).enabled


# -- on a real topic -------------------------------------------------------------------------------


def numbered(n: int, start_ms: int = BASE_MS) -> list[bytes]:
    """Messages published one second apart from ``start_ms`` (publish time is their entry time
    when the broker stores no timestamp)."""
    return [message(b"%d" % i, seq=i, publish_time=start_ms + 1000 * i) for i in range(n)]


def test_the_count_threshold_on_a_managed_ledger(on_topic):
    async def scenario(h, topic) -> None:
        (c,) = subscribe_many(topic, 1)
        stored = await publish_numbered(h, 10, c)
        ml = topic.ml
        first = ml.next_position(topic.subscriptions["fans"].cursor.mark_delete_position)
        threshold = threshold_for(ml, LagLimits(max_messages=3), 0.0, first)
        assert threshold is not None and threshold.position == stored[6]
        assert threshold_for(ml, LagLimits(max_messages=10), 0.0, first) is None

    on_topic(scenario)


def test_the_age_threshold_is_the_last_entry_older_than_the_limit(on_topic):
    async def scenario(h, topic) -> None:
        (c,) = subscribe_many(topic, 1)
        before = len(c.cnx.received)
        stored = [await h.publish_nowait(m) for m in numbered(10)]
        assert len(stored) == 10 and before == 0
        ml = topic.ml
        first = stored[0]
        # At BASE + 9.5 s with a limit of 4 s: entries 0..5 (times 0..5 s) are older than 5.5 s.
        now_s = (BASE_MS + 9_500) / 1000
        threshold = threshold_for(ml, LagLimits(max_seconds=4), now_s, first)
        assert threshold is not None and threshold.position == stored[5]
        # Nothing unacknowledged is that old: no search, no threshold.
        assert threshold_for(ml, LagLimits(max_seconds=4), now_s, stored[6]) is None
        assert threshold_for(ml, LagLimits(max_seconds=60), now_s, first) is None
        # Both limits: the higher threshold decides.
        both = threshold_for(ml, LagLimits(max_messages=2, max_seconds=4), now_s, first)
        assert both is not None and both.position == stored[7]

    on_topic(scenario, broker_entry_metadata_interceptors=[])


def test_a_damaged_entry_amid_young_ones_does_not_move_the_age_cut(on_topic):
    """A damaged entry is not taken for an old one (issue 34): the binary search lands on entry 7
    here, and had it counted as old the cut would be entry 7, closing consumers within the limit."""

    async def scenario(h, topic) -> None:
        (_consumer,) = subscribe_many(topic, 1)
        stored = [await h.publish_nowait(m) for m in numbered(10)]
        ml = topic.ml

        def read(position: Position) -> EntryData:
            if position == stored[7]:
                raise EntryNotFoundError(f"entry {position} is damaged")
            return ml.read_entry(position).data

        now_s = (BASE_MS + 9_500) / 1000  # entries 0..5 are older than 5.5 s, as above
        threshold = threshold_for(ml, LagLimits(max_seconds=4), now_s, stored[0], read)
        assert threshold is not None and threshold.position == stored[5]
        # The oldest unacknowledged entry damaged and the next readable one young: nobody lags.
        assert threshold_for(ml, LagLimits(max_seconds=4), now_s, stored[7], read) is None

    on_topic(scenario, broker_entry_metadata_interceptors=[])


def test_a_sweep_closes_the_consumers_past_the_limit_and_frees_the_backlog(on_topic):
    async def scenario(h, topic) -> None:
        slow, fast, middling = subscribe_many(topic, 3)
        stored = await publish_numbered(h, 10, slow, fast, middling)
        ack(fast, *stored)
        ack(middling, *stored[:7])  # 3 left: at the limit, not past it
        ack(slow, *stored[:2])  # 8 left
        sub = topic.subscriptions["fans"]
        dispatcher = sub.dispatcher
        assert sub.cursor.backlog() == 8
        assert sweep_subscription(dispatcher, LagLimits(max_messages=3), 0.0) == 1
        assert slow.cnx.closed_consumers == [slow.consumer_id] and slow not in dispatcher.consumers
        assert not fast.cnx.closed_consumers and not middling.cnx.closed_consumers
        # Its virtual cursor is given up: the subscription now waits only for the middling one.
        assert sub.cursor.backlog() == 3
        assert dispatcher.stats()["lagDisconnects"] == 1
        # Subscribing again, it starts where the subscription is: what it missed is gone for it.
        again = join(topic, "c0", 10)
        assert dispatcher.consumers[again].mark_delete == stored[6]
        assert sweep_subscription(dispatcher, LagLimits(max_messages=3), 0.0) == 0

    on_topic(scenario)


def test_a_detached_virtual_cursor_past_the_limit_is_given_up(on_topic):
    async def scenario(h, topic) -> None:
        gone, fast = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 6, gone, fast)
        ack(fast, *stored)
        gone.cnx.closed = (
            True  # its connection was lost: its virtual cursor is kept detached for the grace period
        )
        topic.subscriptions["fans"].remove_consumer(gone)
        dispatcher = topic.subscriptions["fans"].dispatcher
        assert list(dispatcher.detached) == ["c0"]
        assert sweep_broadcast_lag({"t": topic}, LagLimits(max_messages=2), 0.0) == 1
        assert not dispatcher.detached and topic.subscriptions["fans"].cursor.backlog() == 0

    on_topic(scenario, broadcast_reconnect_grace_seconds=60)


def test_a_sweep_with_the_policy_off_touches_nothing(on_topic):
    async def scenario(h, topic) -> None:
        slow, fast = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 5, slow, fast)
        ack(fast, *stored)
        assert sweep_broadcast_lag({"t": topic}, LagLimits(), 0.0) == 0
        assert slow in topic.subscriptions["fans"].dispatcher.consumers

    on_topic(scenario)


@pytest.mark.parametrize("name", ["broadcast_max_lag_messages", "broadcast_max_lag_seconds"])
def test_negative_limits_are_refused(harnesses, name):
    with pytest.raises(ValueError, match=name):
        harnesses(**{name: -1})


def test_the_check_interval_must_be_positive(harnesses):
    with pytest.raises(ValueError, match="broadcast_lag_check_interval_seconds"):
        harnesses(broadcast_lag_check_interval_seconds=0)
