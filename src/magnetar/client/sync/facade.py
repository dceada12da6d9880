"""What every blocking facade shares: the asyncio handler it fronts, and the client's loop."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Generic, Protocol, Self, TypeVar

from magnetar.client.sync.loop import ClientLoop

R = TypeVar("R")


class Handle(Protocol):
    """An asyncio producer, consumer or reader, as a facade uses it whatever its kind."""

    def topic(self) -> str: ...

    def is_connected(self) -> bool: ...

    async def close(self) -> None: ...


H = TypeVar("H", bound=Handle)


class Facade(Generic[H]):
    """The blocking face of the asyncio handler ``inner``, run on ``client_loop``."""

    def __init__(self, client_loop: ClientLoop, inner: H) -> None:
        self._loop = client_loop
        self._inner = inner

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self._loop.run(coro)

    def topic(self) -> str:
        return self._inner.topic()

    def is_connected(self) -> bool:
        return self._inner.is_connected()

    def close(self) -> None:
        if not self._loop.is_closed():
            self._run(self._inner.close())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
