"""The blocking TableView: reads on the caller's thread, listeners on the client's listener thread."""

from __future__ import annotations

import concurrent.futures
import logging

from magnetar.client.sync.facade import Facade
from magnetar.client.table_view import TableView as AioTableView
from magnetar.client.table_view import TableViewAction

log = logging.getLogger(__name__)


class TableView(Facade[AioTableView]):
    """``get``, ``len()`` and ``in`` read the view as it is (one dict operation each); ``keys``,
    ``values``, ``items`` and ``for_each`` take a copy made on the client's loop, so none sees a
    half-applied change. Listeners run on the client's listener thread, in order, as the blocking
    client's ``message_listener``."""

    def get(self, key: str) -> bytes | None:
        return self._inner.get(key)

    def contains_key(self, key: str) -> bool:
        return self._inner.contains_key(key)

    __contains__ = contains_key

    def size(self) -> int:
        return self._inner.size()

    __len__ = size

    def is_empty(self) -> bool:
        return self._inner.is_empty()

    def snapshot(self) -> dict[str, bytes]:
        """A copy of the keys and values as they are now."""

        async def copy() -> dict[str, bytes]:
            return self._inner.snapshot()

        return self._run(copy())

    def keys(self) -> list[str]:
        return list(self.snapshot())

    def values(self) -> list[bytes]:
        return list(self.snapshot().values())

    def items(self) -> list[tuple[str, bytes]]:
        return list(self.snapshot().items())

    def for_each(self, action: TableViewAction) -> None:
        """``action(key, value)`` for every key held now, on the caller's thread."""
        for key, value in self.snapshot().items():
            action(key, value)

    def listen(self, action: TableViewAction) -> None:
        """``action(key, value)`` for every message with a key from now on (``b""``: a tombstone),
        on the listener thread."""

        async def install() -> None:
            self._inner.listen(self._on_listener_thread(action))

        self._run(install())

    def for_each_and_listen(self, action: TableViewAction) -> None:
        """``action`` for every key held now, then for every change, in that order on the listener
        thread; returns once the keys held now have been through it."""
        executor = self._loop.listeners
        inline = self._loop.on_listener_thread()  # what it submits runs after this call returns

        async def install() -> tuple[dict[str, bytes], list[concurrent.futures.Future[None]]]:
            held = self._inner.snapshot()
            done = [] if inline else [executor.submit(_call, action, k, v) for k, v in held.items()]
            self._inner.listen(self._on_listener_thread(action))
            return held, done

        held, done = self._run(install())
        if inline:
            for key, value in held.items():
                _call(action, key, value)
        else:
            concurrent.futures.wait(done)

    def refresh(self, timeout_millis: int | None = None) -> None:
        """Wait until every message the broker has now is applied (``Timeout`` after ``timeout_millis``)."""
        self._run(self._inner.refresh(timeout_millis))

    def _on_listener_thread(self, action: TableViewAction) -> TableViewAction:
        executor = self._loop.listeners

        def submit(key: str, value: bytes) -> None:
            try:
                executor.submit(_call, action, key, value)
            except RuntimeError:  # the client is closing: its listener thread is gone
                log.debug("table view change after the client closed: not heard")

        return submit

    def __str__(self) -> str:
        return str(self._inner)

    __repr__ = __str__


def _call(action: TableViewAction, key: str, value: bytes) -> None:
    try:
        action(key, value)
    except Exception:
        log.exception("table view listener failed")
