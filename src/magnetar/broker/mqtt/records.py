"""Small durable records in the metadata store, written in the order they change.

The MQTT sessions and the retained messages are records keyed by a client id or a topic: each
change replaces the whole record (or deletes it). ``RecordWriter`` keeps the latest value of
every key changed since the last write and writes them all in one group-committed transaction,
one write at a time, so a later value of a key never lands before an earlier one, and many
changes between two writes cost one commit. ``set`` answers once the value (or a later one) is
durable.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor

from magnetar.storage.metadata_store import MetadataStore

log = logging.getLogger(__name__)


class RecordWriter:
    def __init__(self, metadata: MetadataStore, executor: Executor, what: str) -> None:
        self._metadata = metadata
        self._executor = executor
        self._what = what
        self._dirty: dict[str, str | None] = {}
        self._waiting: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def set(self, key: str, value: str | None) -> asyncio.Future[None]:
        """Store ``value`` under ``key`` (None: delete it); done once it is durable."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if self._closed:
            future.set_exception(RuntimeError(f"the {self._what} store is closed"))
            return future
        self._dirty[key] = value
        self._waiting.append(future)
        if self._task is None:
            self._task = loop.create_task(self._write())
        return future

    def put(self, key: str, value: str | None) -> None:
        """``set`` with nobody waiting: a failure is logged."""
        self.set(key, value).add_done_callback(self._logged)

    def _logged(self, done: asyncio.Future[None]) -> None:
        if not done.cancelled() and (exc := done.exception()) is not None:
            log.error("a %s record could not be written: %s", self._what, exc)

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._dirty:
                dirty, self._dirty = self._dirty, {}
                waiting, self._waiting = self._waiting, []
                try:
                    await loop.run_in_executor(self._executor, self._metadata.write_grouped, dirty)
                except Exception as exc:
                    for future in waiting:
                        if not future.done():
                            future.set_exception(exc)
                else:
                    for future in waiting:
                        if not future.done():
                            future.set_result(None)
        finally:
            self._task = None

    def flush_now(self) -> None:
        """Write what is still to be written, blocking (at shutdown, once the executor has
        finished its writes: nothing older can land after it)."""
        dirty, self._dirty = self._dirty, {}
        waiting, self._waiting = self._waiting, []
        error: Exception | None = None
        if dirty:
            try:
                self._metadata.write_grouped(dirty)
            except Exception as exc:
                log.error("%d %s records could not be written at shutdown: %s", len(dirty), self._what, exc)
                error = exc
        for future in waiting:
            if not future.done():
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)

    async def drain(self) -> None:
        """Wait for what was set so far to be written (tests, shutdown)."""
        while self._task is not None:
            await asyncio.shield(self._task)

    def close(self) -> None:
        """Take no more; what is being written finishes."""
        self._closed = True
