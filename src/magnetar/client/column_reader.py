"""A reader that hands over messages as columns (``receive_columns``), not one by one.

For bulk readers (the Spark connector's tasks) the per-message objects and awaits of
``read_next`` are most of the cost of small messages. A ``ColumnReader`` queues each entry as one
``MessageColumns`` (a batch parsed once, its members slices of its payload; a chunked message
still assembled whole by the chunk assembler) and ``receive_columns`` takes as many queued
entries as fit the limits in one call. Everything else is the ``Reader``'s: start position,
reconnection from the last row handed out, cumulative acknowledgements, flow permits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from magnetar.client.columns import MessageColumns
from magnetar.client.errors import AlreadyClosed
from magnetar.client.handler import State
from magnetar.client.message import Message, MessageId
from magnetar.client.reader import Reader
from magnetar.client.receive_queue import ReceiveQueue

if TYPE_CHECKING:
    from magnetar.client.services import ClientServices

#: Defaults of ``receive_columns``' limits.
DEFAULT_MAX_MESSAGES = 10_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class ColumnReader(Reader):
    """``receive_columns()`` the messages of a topic partition from ``start_message_id`` on.

    Takes the ``Reader``'s arguments; ``read_next`` and listeners are not available (every
    message comes in a ``MessageColumns``)."""

    def __init__(
        self, client: ClientServices, topic: str, start_message_id: MessageId, **options: Any
    ) -> None:
        super().__init__(client, topic, start_message_id, **options)
        # The base's queue and its permits, holding this reader's entries as columns: the entry
        # receiver queues nothing else here.
        self._columns = cast("ReceiveQueue[MessageColumns]", self._queue)
        self._entries.columns = self._columns

    async def receive_columns(
        self,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_bytes: int = DEFAULT_MAX_BYTES,
        timeout_millis: int | None = None,
    ) -> MessageColumns:
        """The next messages, whole entries (and whole chunked messages) in order, as columns:
        what is queued, taking entries until ``max_messages`` rows or ``max_bytes`` of payload is
        reached (the last entry taken may pass either limit; at least one entry comes). Waits for
        one if none is queued; raises Timeout after ``timeout_millis`` (None: wait for ever)."""
        if self.state in (State.CLOSING, State.CLOSED):
            raise AlreadyClosed(f"{self.name} is closed")
        first = self._columns.take()
        if first is None:
            waiter = self._columns.add_waiter()
            self._flow.ask_for_one()
            first = await self._columns.wait(waiter, timeout_millis)
        out = first
        nbytes = out.nbytes
        while len(out) < max_messages and nbytes < max_bytes:
            more = self._columns.take()
            if more is None:
                break
            out.extend(more)
            nbytes += more.nbytes
        return out

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        raise TypeError("a ColumnReader hands messages over with receive_columns(), not read_next()")

    async def receive(self, timeout_millis: int | None = None) -> Message:
        raise TypeError("a ColumnReader hands messages over with receive_columns(), not receive()")

    def set_listener(self, listener: Any) -> None:
        raise TypeError("a ColumnReader hands messages over with receive_columns(), not to a listener")

    def _message_processed(self, msg: Any) -> None:
        """An entry's columns were handed out: give their permits back, and acknowledge up to
        the last row (cumulatively, as the Reader does once per entry)."""
        cols: MessageColumns = msg
        last = cols.last_message_id()
        self._start.last_dequeued = last
        if cols.cnx_generation == self.cnx_generation:
            self._flow.increase(len(cols))
        self.acknowledge_cumulative_nowait(last)
