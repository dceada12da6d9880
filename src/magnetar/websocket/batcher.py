"""A WebSocket producer's batching (Pulsar's ``batchingEnabled``, ``batchingMaxMessages``,
``batchingMaxPublishDelay``), as the Java client under Pulsar's WebSocket service batches.

Messages for one producer (one partition) gather until ``max_messages`` are in, or ``max_bytes``
of payload (the Java client's ``batchingMaxBytes``, 128 KiB), or ``max_delay_s`` after the first,
and go as one entry (``LocalProducer.send_batch``); each is answered with its own id (its
``batch_index`` and ``batch_size``) once the entry is on disk. A message that cannot share an
entry (delayed, or routed for replication) first sends what is gathered, then goes alone, so
the order of the messages is the order of the entries.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from magnetar.websocket.local_producer import batchable

if TYPE_CHECKING:
    from magnetar.protocol import wire
    from magnetar.websocket.json_shapes import OutgoingMessage
    from magnetar.websocket.local_producer import LocalProducer

#: The Java client's defaults.
DEFAULT_MAX_MESSAGES = 1000
DEFAULT_MAX_BYTES = 128 * 1024
DEFAULT_MAX_DELAY_MS = 1


class Batcher:
    """``send`` gathers; the entry goes when full, or when the delay since its first message ends."""

    def __init__(
        self,
        producer: LocalProducer,
        max_messages: int = DEFAULT_MAX_MESSAGES,
        max_delay_s: float = DEFAULT_MAX_DELAY_MS / 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.producer = producer
        self.max_messages = max(1, max_messages)
        self.max_delay_s = max(0.0, max_delay_s)
        self.max_bytes = max_bytes
        self._messages: list[OutgoingMessage] = []
        self._futures: list[asyncio.Future[wire.MessageIdData]] = []
        self._bytes = 0
        self._timer: asyncio.TimerHandle | None = None

    def send(self, message: OutgoingMessage) -> asyncio.Future[wire.MessageIdData]:
        """The future of ``message``'s id, answered once its entry is stored (or refused)."""
        if not batchable(message):
            self.flush()
            return self.producer.send(message)
        if self._messages and self._bytes + len(message.payload) > self.max_bytes:
            self.flush()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[wire.MessageIdData] = loop.create_future()
        self._messages.append(message)
        self._futures.append(future)
        self._bytes += len(message.payload)
        if len(self._messages) >= self.max_messages or self._bytes >= self.max_bytes:
            self.flush()
        elif len(self._messages) == 1:
            self._timer = loop.call_later(self.max_delay_s, self.flush)
        return future

    def flush(self) -> None:
        """Send what is gathered as one entry (nothing if nothing is)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._messages:
            return
        messages, futures = self._messages, self._futures
        self._messages, self._futures, self._bytes = [], [], 0
        self.producer.send_batch(messages, futures)
