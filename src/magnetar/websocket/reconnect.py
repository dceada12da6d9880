"""How a WebSocket producer, consumer or reader finds its topic again when the broker ends it
there: the topic's bundle was unloaded or moved (CLOSE_PRODUCER / CLOSE_CONSUMER), or with
``--workers`` the connection to the worker that owned it ended (that worker was killed and is
being started again). Pulsar's WebSocket service keeps the WebSocket open through that, as its
internal Java client reconnects: it looks the topic up again and attaches at the new owner, with
a backoff between tries. So do we, within ``RECONNECT_BOUND_S``; past it, or on a refusal that
trying again does not change (the grant was revoked ...), the WebSocket is closed with the reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from magnetar.protocol import wire
from magnetar.websocket.session import SessionError

T = TypeVar("T")

#: The first pause before trying again, the longest one, and how long tries go on in all (the
#: Java client's operation timeout: what a Pulsar client waits for a producer or a consumer).
FIRST_PAUSE_S = 0.1
MAX_PAUSE_S = 2.0
RECONNECT_BOUND_S = 30.0

#: Refusals that trying again does not change: the producer or consumer ends at once.
FINAL = frozenset(
    {
        wire.AuthenticationError,
        wire.AuthorizationError,
        wire.TopicNotFound,
        wire.TopicTerminatedError,
        wire.IncompatibleSchema,
    }
)


class Backoff:
    """Pauses doubling from ``first`` up to ``most``; ``pause()`` is None once ``bound`` seconds
    have passed since the first call (or the next pause would end past it)."""

    def __init__(
        self,
        first: float = FIRST_PAUSE_S,
        most: float = MAX_PAUSE_S,
        bound: float = RECONNECT_BOUND_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._next = first
        self._most = most
        self._clock = clock
        self.bound = bound
        self._deadline = clock() + bound

    def remaining(self) -> float:
        return max(self._deadline - self._clock(), 0.0)

    def pause(self) -> float | None:
        remaining = self.remaining()
        if remaining <= 0:
            return None
        pause = min(self._next, remaining)
        self._next = min(self._next * 2, self._most)
        return pause


async def again(attempt: Callable[[], Awaitable[T]], reason: str, backoff: Backoff | None = None) -> T:
    """``attempt()`` after a pause, until it succeeds; SessionError once the bound has passed or
    the refusal is final, saying why first (a WebSocket close reason holds 123 bytes), then
    ``reason``."""
    backoff = backoff or Backoff()
    last = "gave up"
    while (pause := backoff.pause()) is not None:
        await asyncio.sleep(pause)
        remaining = backoff.remaining()
        if remaining <= 0:
            break
        try:
            return await asyncio.wait_for(attempt(), remaining)
        except TimeoutError:
            last = "no answer"
            break
        except SessionError as exc:
            last = str(exc)
            if exc.code in FINAL:
                raise SessionError(f"{exc} (attaching again after: {reason})", exc.code) from None
    raise SessionError(
        f"not reachable again within {backoff.bound:g} s: {last} (after: {reason})", wire.ServiceNotReady
    )
