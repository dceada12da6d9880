"""The suite's polling helper returns as soon as its event happens and says what it waited for."""

import asyncio
import itertools

import pytest

from tests.waiting import NeverHappened, eventually, eventually_async


def test_returns_the_first_truthy_value():
    counter = itertools.count()
    assert eventually(lambda: next(counter) >= 3 and "seen", interval=0) == "seen"


def test_an_assertion_error_means_not_yet():
    calls = itertools.count()

    def check():
        n = next(calls)
        assert n >= 2, f"only {n}"
        return n

    assert eventually(check, interval=0) == 2


def test_a_timeout_names_the_event_and_the_last_reason():
    def check():
        raise AssertionError("still 0 of 5")

    with pytest.raises(NeverHappened, match=r"five messages did not happen within 0.05 s.*still 0 of 5"):
        eventually(check, timeout=0.05, what="five messages")


def test_other_errors_are_not_swallowed():
    with pytest.raises(ZeroDivisionError):
        eventually(lambda: 1 / 0)


def test_async_checks_may_be_coroutines():
    seen = []

    async def check():
        seen.append(1)
        return len(seen) == 3

    assert asyncio.run(eventually_async(check, interval=0)) is True
    assert len(seen) == 3


def test_async_timeout_fails():
    with pytest.raises(NeverHappened):
        asyncio.run(eventually_async(lambda: False, timeout=0.05))
