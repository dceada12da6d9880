"""The blocking column reader: each call waits for the asyncio ``ColumnReader`` on the loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from magnetar.client.chunks import ChunkProgress
from magnetar.client.column_reader import DEFAULT_MAX_BYTES, DEFAULT_MAX_MESSAGES
from magnetar.client.column_reader import ColumnReader as AioColumnReader
from magnetar.client.columns import MessageColumns
from magnetar.client.message import MessageId
from magnetar.client.sync.facade import Facade

R = TypeVar("R")


class ColumnReader(Facade[AioColumnReader]):
    """A reader whose messages come as columns, whole entries at a time (``receive_columns``):
    the asyncio ``ColumnReader``'s calls, each waiting for the client's loop. Its position moves
    (and its entries are acknowledged) as columns are handed out."""

    def receive_columns(
        self,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        timeout_millis: int | None = None,
    ) -> MessageColumns:
        """The next queued entries as columns, until ``max_messages`` rows or ``max_bytes`` of
        payload (at least one entry); waits for one if none is queued, raising
        ``magnetar.client.errors.Timeout`` after ``timeout_millis``."""
        return self._run(self._inner.receive_columns(max_messages, max_bytes, timeout_millis))

    def has_message_available(self) -> bool:
        return self._run(self._inner.has_message_available())

    def seek(self, position: MessageId | int) -> None:
        self._run(self._inner.seek(position))

    def get_last_message_id(self) -> MessageId:
        return self._run(self._inner.get_last_message_id())

    def queued_messages(self) -> int:
        """Entries received and not handed out yet."""
        return self._on_loop(lambda: self._inner.queued_messages)

    def chunk_progress(self) -> ChunkProgress:
        """How far chunked messages have come (the asyncio reader's ``chunk_progress()``, read on
        the loop): the newest chunk taken in, the first chunks of messages not handed out yet."""
        return self._on_loop(self._inner.chunk_progress)

    def _on_loop(self, fn: Callable[[], R]) -> R:
        async def call() -> R:
            return fn()

        return self._run(call())
