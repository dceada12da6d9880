"""FrameBudget: room for large frames being received, granted first come first served."""

from __future__ import annotations

from magnetar.broker.frame_budget import FrameBudget


def test_room_is_reserved_within_the_limit_and_waiters_get_it_in_order_as_it_frees():
    budget = FrameBudget(10)
    assert budget.reserve("a", 6, now=0.0)
    assert budget.reserve("a", 6, now=1.0)  # asking again while holding: still held, once
    assert budget.bytes == 6
    assert not budget.reserve("b", 6, now=1.0)
    assert not budget.reserve("c", 1, now=1.0)  # fits, but b came first
    assert not budget.reserve("b", 6, now=2.0)  # waits once
    assert budget.times_full == 1 and list(budget.waiters) == ["b", "c"]
    assert budget.release("a", now=3.0) == ["b", "c"]
    assert budget.bytes == 7 and budget.holders["b"] == (6, 3.0)
    assert budget.release("b", now=4.0) == [] and budget.release("c", now=4.0) == []
    assert budget.bytes == 0 and not budget.holders


def test_a_frame_larger_than_the_limit_is_let_in_alone_and_zero_means_no_limit():
    budget = FrameBudget(10)
    assert budget.reserve("big", 50, now=0.0)
    assert not budget.reserve("small", 1, now=0.0)
    assert budget.release("big", now=1.0) == ["small"]
    unlimited = FrameBudget(0)
    assert all(unlimited.reserve(n, 1 << 30, now=0.0) for n in range(5))


def test_leaving_the_line_grants_nobody_room_it_did_not_have_and_overdue_needs_a_waiter():
    budget = FrameBudget(10)
    assert budget.reserve("old", 5, now=0.0)
    assert budget.reserve("new", 5, now=8.0)
    assert budget.overdue(now=20.0, timeout=10.0) == []  # nobody waits: nobody is in the way
    assert not budget.reserve("w1", 5, now=20.0)
    assert not budget.reserve("w2", 5, now=20.0)
    assert budget.release("w1", now=20.0) == []  # its connection closed while waiting
    assert budget.overdue(now=18.0, timeout=10.0) == ["old", "new"]
    assert budget.overdue(now=17.0, timeout=10.0) == ["old"]
    assert budget.release("old", now=21.0) == ["w2"]
