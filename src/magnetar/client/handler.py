"""What producers and consumers share: a state, a current connection, and reconnecting with backoff.

``HandlerBase.start()`` looks the topic up and registers on the broker (``_connection_opened``,
given by the subclass). When the connection drops, or the broker closes the producer or
consumer, it reconnects with exponential backoff until it succeeds or the handler is closed.
The first attempt's non-retriable error fails creation instead.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from magnetar.client.errors import AlreadyClosed, ClientError, ConnectionClosed, Timeout

if TYPE_CHECKING:
    from magnetar.client.connection import Connection
    from magnetar.client.services import ClientServices
    from magnetar.protocol import pulsar_wire_pb2 as wire

log = logging.getLogger(__name__)


class State(enum.Enum):
    PENDING = "pending"
    READY = "ready"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


class Backoff:
    """Exponential backoff with a little jitter: initial, doubling, up to max."""

    def __init__(self, initial: float = 0.1, maximum: float = 30.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.maximum)
        return delay * random.uniform(0.9, 1.1)

    def reset(self) -> None:
        self._next = self.initial


class HandlerBase:
    """A producer or consumer's link to the broker that owns its topic."""

    def __init__(self, client: ClientServices, topic: str) -> None:
        self.client = client
        self._topic = topic
        self.state = State.PENDING
        self.cnx: Connection | None = None
        #: Bumped on every new connection; messages remember which one brought them.
        self.cnx_generation = 0
        self._backoff = Backoff(client.initial_backoff, client.max_backoff)
        self._reconnect_task: asyncio.Task | None = None
        self._ready = asyncio.Event()
        self._created = False

    @property
    def name(self) -> str:
        return f"{type(self).__name__}({self._topic})"

    def topic(self) -> str:
        return self._topic

    def is_connected(self) -> bool:
        return self.state is State.READY and self.cnx is not None and not self.cnx.is_closed

    async def start(self) -> None:
        """Connect for the first time; raises if that fails for good or times out."""
        deadline = asyncio.get_running_loop().time() + self.client.operation_timeout
        while True:
            try:
                await self._connect_once()
                self._created = True
                return
            except ClientError as exc:
                if not exc.retriable:
                    self.state = State.FAILED
                    raise
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    self.state = State.FAILED
                    raise Timeout(f"{self.name}: could not connect in time: {exc}") from exc
                await asyncio.sleep(min(self._backoff.next(), remaining))

    async def _connect_once(self) -> None:
        cnx = await self.client.connection_for_topic(self._topic)
        if self.state in (State.CLOSING, State.CLOSED):
            raise AlreadyClosed(f"{self.name} is closed")
        self.cnx = cnx
        self.cnx_generation += 1
        try:
            await self._connection_opened(cnx)
        except BaseException:
            if self.cnx is cnx:
                self.cnx = None
            raise
        self.state = State.READY
        self._backoff.reset()
        self._ready.set()

    async def _connection_opened(self, cnx: Connection) -> None:
        raise NotImplementedError

    async def _register(self, cnx: Connection, request: Any, unregister: Callable[[], None]) -> Any:
        """Send the PRODUCER or SUBSCRIBE ``request`` (the handler is registered on ``cnx``
        already); the registration is undone if it fails or the handler was closed meanwhile."""
        try:
            answer = await cnx.request(request)
        except BaseException:
            unregister()
            raise
        if self.state in (State.CLOSING, State.CLOSED):
            unregister()
            raise AlreadyClosed(f"{self.name} closed while connecting")
        return answer

    def _send_if_ready(self, command: wire.BaseCommand) -> bool:
        """Send ``command`` on the current connection if ready; False if it could not go."""
        cnx = self.cnx
        if cnx is None or cnx.is_closed or self.state is not State.READY:
            return False
        try:
            cnx.send_command(command)
        except ConnectionClosed:
            return False
        return True

    def on_close_by_broker(self, cnx: Connection) -> None:
        if cnx is self.cnx:
            log.info("%s closed by the broker, reconnecting", self.name)
            self._connection_lost()

    def on_connection_closed(self, cnx: Connection) -> None:
        if cnx is self.cnx:
            self._connection_lost()

    def _reconnect_refused(self, exc: ClientError) -> None:
        """A reconnect attempt failed with ``exc``; the loop tries again. Subclasses may act on why."""

    def _connection_lost(self) -> None:
        """Called when the connection dropped or the broker closed us: reconnect in the background."""
        self.cnx = None
        self._ready.clear()
        if not self._created or self.state in (State.CLOSING, State.CLOSED, State.FAILED):
            return  # start() retries by itself while creating
        self.state = State.PENDING
        if self._reconnect_task is None or self._reconnect_task.done():
            self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect_loop())

    async def _reconnect_loop(self) -> None:
        while self.state is State.PENDING:
            await asyncio.sleep(self._backoff.next())
            if self.state is not State.PENDING:
                return
            try:
                await self._connect_once()
                log.info("%s reconnected to %s", self.name, self.cnx.address if self.cnx else "?")
                return
            except AlreadyClosed:
                return
            except ClientError as exc:
                log.info("%s reconnect failed: %s", self.name, exc)
                self._reconnect_refused(exc)
            except Exception:
                log.exception("%s reconnect failed", self.name)

    async def wait_ready(self, timeout: float | None = None) -> Connection:
        """The current connection, waiting (up to ``timeout``) for a reconnect in progress."""
        if self.state in (State.CLOSING, State.CLOSED):
            raise AlreadyClosed(f"{self.name} is closed")
        if not self._ready.is_set():
            try:
                async with asyncio.timeout(timeout or self.client.operation_timeout):
                    await self._ready.wait()
            except TimeoutError:
                raise Timeout(f"{self.name} is not connected") from None
        assert self.cnx is not None
        return self.cnx

    async def close(self) -> None:
        raise NotImplementedError

    def is_closed(self) -> bool:
        return self.state is State.CLOSED

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    def _stop_reconnecting(self) -> None:
        task = self._reconnect_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        self._reconnect_task = None
