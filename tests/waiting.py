"""Waiting on events, not on time: the suite's one polling helper.

A test that sleeps and then looks is either slow (the sleep is long) or flaky (the sleep is short
on a loaded machine). ``eventually`` looks again and again until the event is seen, so it returns
as soon as the event happens and waits up to ``timeout`` only when it does not: the timeout is a
bound on a failure, never a guess at how long success takes.

``check`` either returns a value (a falsy one means "not yet") or raises ``AssertionError`` ("not
yet, and here is why"). The last reason is in the failure message, so a test that times out says
what it was waiting for and what it saw instead.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT = 15.0
DEFAULT_INTERVAL = 0.02


class NeverHappened(AssertionError):
    """What ``eventually`` raises when the event did not happen within the timeout."""


def _failure(what: str | None, timeout: float, last: object) -> NeverHappened:
    name = what or "the condition"
    detail = f": last saw {last!r}" if last is not None else ""
    return NeverHappened(f"{name} did not happen within {timeout:g} s{detail}")


def eventually(
    check: Callable[[], T],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    what: str | None = None,
) -> T:
    """Call ``check`` until it returns something truthy (which is returned) or stops failing."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = check()
            if result:
                return result
            last = result
        except AssertionError as error:
            last = error
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, last)
        time.sleep(interval)


async def eventually_async(
    check: Callable[[], T] | Callable[[], Awaitable[T]],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    what: str | None = None,
) -> T:
    """``eventually`` for a test on an event loop: the loop runs between looks.

    ``check`` may be a plain function or a coroutine function.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result  # type: ignore[return-value]
            last = result
        except AssertionError as error:
            last = error
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, last)
        await asyncio.sleep(interval)
