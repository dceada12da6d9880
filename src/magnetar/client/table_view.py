"""TableView: the latest value of every key of a topic, kept up to date, as Pulsar's clients have it.

Like the official clients' (the C++ ``TableViewImpl`` under the Python one, Java's), it reads the
topic with readers from the earliest message with ``is_read_compacted=True``, one per partition, so
a compacted topic replays one message per key and then follows what is published. A message with a
key sets its value; one with an empty payload (a tombstone) removes the key; a message without a
key changes nothing. Creating it returns once every partition has been read up to the last message
the broker names (``refresh``); from then on the readers' listeners apply each message on the
event loop, and the view's listeners hear of it there. On a partitioned topic it looks for
partitions added since every ``partitions_update_interval_seconds`` (the C++ client's
``partitionsUpdateInterval``, 60 s) and reads each new one from its earliest message, as the C++
client's reader of a partitioned topic does.

Memory: one entry per key, held in this process. The bound is the user's choice of topic: a topic
of vehicle positions holds one value per vehicle; a topic keyed by something unbounded holds as much.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, ItemsView, KeysView, ValuesView

from magnetar.client.errors import AlreadyClosed, Timeout
from magnetar.client.message import Message, MessageId
from magnetar.client.reader import Reader

log = logging.getLogger(__name__)

#: ``action(key, value)``: a value's bytes, or ``b""`` for a key a tombstone removed (to listeners).
TableViewAction = Callable[[str, bytes], None]
#: The topic's partition count now.
PartitionCount = Callable[[], Awaitable[int]]
#: ``open(first, count)``: started readers of partitions ``first`` to ``count - 1``.
OpenPartitions = Callable[[int, int], Awaitable[list[Reader]]]


class TableView:
    """The latest value of every key of ``topic`` (``bytes``), over all its partitions.

    Made by ``Client.create_table_view``; the names are the official client's (``get``,
    ``for_each``, ``for_each_and_listen``, ``close``, ``len()``) and Java's (``keys``,
    ``values``, ``items``, ``listen``, ``contains_key``, ``is_empty``, ``size``, ``refresh``).
    """

    def __init__(self, topic: str, readers: list[Reader], subscription_name: str | None = None) -> None:
        self._topic = topic
        self._subscription = subscription_name
        self._readers = readers
        self._data: dict[str, bytes] = {}
        self._listeners: list[TableViewAction] = []
        #: The id of the last message applied from each reader (None: none yet).
        self._applied: list[MessageId | None] = [None] * len(readers)
        #: ``refresh`` calls waiting: the last message ids they wait for, and their futures.
        self._waiters: list[tuple[list[MessageId], asyncio.Future[None]]] = []
        self._closed = False
        #: Partitions added to the topic: how to see them and read them, and how often to look.
        self._partitions: tuple[PartitionCount, OpenPartitions, float] | None = None
        self._watch: asyncio.Task[None] | None = None

    def follow_partitions(
        self, count: PartitionCount, open_partitions: OpenPartitions, interval: float
    ) -> None:
        """Look for partitions added to the topic every ``interval`` seconds once started, and
        follow each from its earliest message (``Client.create_table_view`` sets it)."""
        self._partitions = (count, open_partitions, interval)

    async def start(self) -> None:
        """Follow every reader, and return once what each partition held has been applied."""
        for index, reader in enumerate(self._readers):
            reader.set_listener(functools.partial(self._apply, index))
        try:
            await self.refresh()
        except BaseException:
            await self.close()
            raise
        if self._partitions is not None:
            self._watch = asyncio.get_running_loop().create_task(self._watch_partitions(*self._partitions))

    async def _watch_partitions(
        self, count: PartitionCount, open_partitions: OpenPartitions, interval: float
    ) -> None:
        """Every ``interval``: readers for the partitions added since, each followed as the others
        (a failed look is logged and tried again at the next)."""
        while not self._closed:
            await asyncio.sleep(interval)
            try:
                partitions = await count()
                if partitions <= len(self._readers):
                    continue
                added = await open_partitions(len(self._readers), partitions)
            except Exception as exc:
                log.warning("table view of %s: looking for new partitions failed: %s", self._topic, exc)
                continue
            if self._closed:
                await asyncio.gather(*(reader.close() for reader in added), return_exceptions=True)
                return
            log.info("table view of %s: following %d new partitions", self._topic, len(added))
            for reader in added:
                index = len(self._readers)
                self._readers.append(reader)
                self._applied.append(None)
                reader.set_listener(functools.partial(self._apply, index))

    # --- what it holds ----------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        """The key's latest value, None when the key is absent (never sent, or removed)."""
        return self._data.get(key)

    def contains_key(self, key: str) -> bool:
        return key in self._data

    __contains__ = contains_key

    def size(self) -> int:
        return len(self._data)

    __len__ = size

    def is_empty(self) -> bool:
        return not self._data

    def keys(self) -> KeysView[str]:
        """A live view of the keys (as ``dict.keys()``); on the event loop's thread only."""
        return self._data.keys()

    def values(self) -> ValuesView[bytes]:
        return self._data.values()

    def items(self) -> ItemsView[str, bytes]:
        return self._data.items()

    def snapshot(self) -> dict[str, bytes]:
        """A copy of the keys and values as they are now."""
        return dict(self._data)

    def for_each(self, action: TableViewAction) -> None:
        """``action(key, value)`` for every key held now."""
        for key, value in list(self._data.items()):
            action(key, value)

    # --- what comes ---------------------------------------------------------------------------------
    def listen(self, action: TableViewAction) -> None:
        """``action(key, value)`` for every message with a key from now on (``b""`` for a
        tombstone), on the event loop; an exception it raises is logged."""
        self._listeners.append(action)

    def for_each_and_listen(self, action: TableViewAction) -> None:
        """``for_each`` then ``listen``, with nothing applied in between."""
        self.for_each(action)
        self.listen(action)

    async def refresh(self, timeout_millis: int | None = None) -> None:
        """Wait until every message the broker had when this was called is applied, so that reads
        after it see them (Java's ``refresh``); ``Timeout`` after ``timeout_millis``."""
        self._check_open()
        lasts = await asyncio.gather(*(reader.get_last_message_id() for reader in self._readers))
        if self._caught_up(lasts):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((lasts, waiter))
        try:
            await asyncio.wait_for(waiter, None if timeout_millis is None else timeout_millis / 1000)
        except TimeoutError:
            raise Timeout(f"table view of {self._topic} did not catch up in {timeout_millis} ms") from None
        finally:
            self._waiters = [(ids, w) for ids, w in self._waiters if w is not waiter]
        self._check_open()

    def _caught_up(self, lasts: list[MessageId]) -> bool:
        """Whether each reader has applied its last message of ``lasts`` (the readers then, in order:
        one added since comes after them)."""
        return all(_reached(applied, last) for applied, last in zip(self._applied, lasts, strict=False))

    def _apply(self, index: int, msg: Message) -> None:
        self._applied[index] = msg.message_id()
        key = msg.partition_key()
        if key is not None:
            value = msg.data()
            if value:
                self._data[key] = value
            else:
                self._data.pop(key, None)
            for listener in list(self._listeners):
                try:
                    listener(key, value)
                except Exception:
                    log.exception("table view listener failed")
        for lasts, waiter in self._waiters:
            if not waiter.done() and self._caught_up(lasts):
                waiter.set_result(None)

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed(f"table view of {self._topic} is closed")

    # --- life ---------------------------------------------------------------------------------------
    def topic(self) -> str:
        return self._topic

    def is_connected(self) -> bool:
        return all(reader.is_connected() for reader in self._readers)

    async def close(self) -> None:
        """Close its readers; what it holds stays readable, and nothing more comes."""
        if self._closed:
            return
        self._closed = True
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)  # and it raises AlreadyClosed
        await asyncio.gather(*(reader.close() for reader in self._readers), return_exceptions=True)

    def __str__(self) -> str:
        if self._subscription is None:
            return f"TableView(topic={self._topic})"
        return f"TableView(topic={self._topic}, subscription={self._subscription})"

    __repr__ = __str__


def _reached(applied: MessageId | None, last: MessageId) -> bool:
    """Whether a reader that applied ``applied`` has read up to the broker's ``last``."""
    if last.entry_id() < 0:
        return True  # the partition holds nothing to read
    return applied is not None and applied >= last
