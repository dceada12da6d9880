"""The backoff and the bound of a WebSocket producer's or consumer's tries to attach again."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.protocol import wire
from magnetar.websocket.reconnect import Backoff, again
from magnetar.websocket.session import SessionError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_pauses_double_up_to_the_most_and_stop_at_the_bound():
    clock = Clock()
    backoff = Backoff(first=0.1, most=0.5, bound=2.0, clock=clock)
    pauses = []
    while (pause := backoff.pause()) is not None:
        pauses.append(pause)
        clock.now += pause
    assert pauses == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5, 0.3])  # the last one ends at the bound


def test_again_returns_the_first_success():
    tries = []

    async def attempt() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise SessionError("the owner is restarting", wire.ServiceNotReady)
        return "attached"

    result = asyncio.run(again(attempt, "closed", Backoff(first=0.001, most=0.002, bound=5)))
    assert result == "attached" and len(tries) == 3


def test_again_gives_up_at_the_bound_with_the_reason_and_the_last_failure():
    async def attempt() -> None:
        raise SessionError("connection refused", wire.ServiceNotReady)

    with pytest.raises(SessionError) as raised:
        asyncio.run(again(attempt, "the owner's connection ended", Backoff(first=0.01, most=0.02, bound=0.1)))
    assert raised.value.code == wire.ServiceNotReady
    assert "the owner's connection ended" in str(raised.value) and "connection refused" in str(raised.value)


def test_a_final_refusal_ends_at_once():
    tries = []

    async def attempt() -> None:
        tries.append(1)
        raise SessionError("not authorized", wire.AuthorizationError)

    with pytest.raises(SessionError) as raised:
        asyncio.run(again(attempt, "closed", Backoff(first=0.001, most=0.001, bound=5)))
    assert raised.value.code == wire.AuthorizationError and len(tries) == 1


def test_an_attempt_that_does_not_answer_ends_at_the_bound():
    async def attempt() -> None:
        await asyncio.sleep(10)

    with pytest.raises(SessionError, match="no answer"):
        asyncio.run(again(attempt, "closed", Backoff(first=0.001, most=0.001, bound=0.1)))
