"""A producer on one topic (or partition) of a session (``session.py``: in-process, or to the
worker that owns the topic).

It builds each message as a client does (``MessageMetadata`` with its sequence id, publish time,
properties, key, event time; the CRC32C checksum) and sends it unbatched, as Pulsar's WebSocket
producer does by default, or several as one batch entry (``send_batch``: each member's own
``SingleMessageMetadata``, as the Java client under Pulsar's WebSocket service batches them). The
broker answers each send with a receipt once the entry is on disk (or a SEND_ERROR), in the order
of the sends: ``send`` returns a future of the message id, ``send_batch`` one per member, whose
ids carry their ``batch_index`` and ``batch_size`` as the official clients' ids do.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from magnetar.protocol import wire
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.commands import wrap
from magnetar.protocol.compression import CompressionType, compress
from magnetar.protocol.headers import encode_headers_and_payload
from magnetar.protocol.message_id import INT64_MAX
from magnetar.protocol.topic_name import TopicName
from magnetar.websocket.json_shapes import OutgoingMessage
from magnetar.websocket.session import LocalSession, SessionClosed, SessionError

#: What ``replicate_to`` holds for a message kept in the local cluster (Pulsar's ``__local__``).
LOCAL_ONLY = "__local__"


class LocalProducer:
    """Made with ``await LocalProducer.create(...)``; ``send`` per message; ``close`` at the end."""

    def __init__(
        self,
        session: LocalSession,
        topic: TopicName,
        producer_id: int,
        name: str,
        last_sequence_id: int,
        schema_version: bytes | None,
        compression: CompressionType,
    ) -> None:
        self.session = session
        self.topic = topic
        self.producer_id = producer_id
        self.name = name
        self.schema_version = schema_version
        self.compression = compression
        self._next_sequence_id = last_sequence_id + 1
        #: Per entry sent and not yet answered: its messages' futures, and whether it is a batch.
        self._pending: deque[tuple[list[asyncio.Future[wire.MessageIdData]], bool]] = deque()
        self.closed = False
        #: Why the producer ended when the broker ended it (CLOSE_PRODUCER, the session closed).
        self.closed_reason = ""
        self._partition = topic.partition_index
        #: Called when the broker ends the producer (not when its owner closes it).
        self.on_gone: Callable[[str], None] = lambda reason: None

    @classmethod
    async def create(
        cls,
        session: LocalSession,
        topic: TopicName,
        name: str | None = None,
        schema: wire.Schema | None = None,
        initial_sequence_id: int | None = None,
        compression: CompressionType = CompressionType.NONE,
    ) -> LocalProducer:
        """PRODUCER on ``topic``; SessionError as the broker refuses it (AuthorizationError,
        ProducerBusy, TopicTerminatedError, IncompatibleSchema ...)."""
        producer_id = session.new_id()
        request_id = session.new_request_id()
        command = wire.CommandProducer(topic=str(topic), producer_id=producer_id, request_id=request_id)
        if name:
            command.producer_name = name
        if schema is not None:
            command.schema.CopyFrom(schema)
        reply = await session.request(wrap(command), request_id)
        last = reply.last_sequence_id
        if initial_sequence_id is not None:
            last = max(last, initial_sequence_id)
        version = reply.schema_version if reply.HasField("schema_version") else None
        producer = cls(session, topic, producer_id, reply.producer_name, last, version, compression)
        session.add_producer(producer_id, producer)
        return producer

    def send(self, message: OutgoingMessage) -> asyncio.Future[wire.MessageIdData]:
        """Send ``message``; the future gets its id once stored (SessionError if refused or lost)."""
        future: asyncio.Future[wire.MessageIdData] = asyncio.get_running_loop().create_future()
        if self.closed:
            future.set_exception(SessionClosed(self.closed_reason or "the producer is closed"))
            return future
        sequence_id = self._sequence_id(message)
        metadata = message_metadata(message, self.name, sequence_id, self.schema_version)
        send = wire.CommandSend(producer_id=self.producer_id, sequence_id=sequence_id, num_messages=1)
        self._send_entry(send, metadata, message.payload, [future], batch=False)
        return future

    def send_batch(
        self, messages: list[OutgoingMessage], futures: list[asyncio.Future[wire.MessageIdData]]
    ) -> None:
        """Send ``messages`` as one batch entry (none of them delayed or routed for replication:
        those go alone, ``batchable``); ``futures`` get their ids."""
        if self.closed:
            for future in futures:
                future.set_exception(SessionClosed(self.closed_reason or "the producer is closed"))
            return
        sequence_ids = [self._sequence_id(message) for message in messages]
        metadata, payload = batch_entry(messages, sequence_ids, self.name, self.schema_version)
        send = wire.CommandSend(
            producer_id=self.producer_id, sequence_id=sequence_ids[0], num_messages=len(messages)
        )
        if len(messages) > 1:
            send.highest_sequence_id = sequence_ids[-1]
        self._send_entry(send, metadata, payload, futures, batch=True)

    def _sequence_id(self, message: OutgoingMessage) -> int:
        sequence_id = message.sequence_id if message.sequence_id is not None else self._next_sequence_id
        self._next_sequence_id = max(self._next_sequence_id, sequence_id + 1)
        return sequence_id

    def _send_entry(
        self,
        send: wire.CommandSend,
        metadata: wire.MessageMetadata,
        payload: bytes,
        futures: list[asyncio.Future[wire.MessageIdData]],
        batch: bool,
    ) -> None:
        if self.compression is not CompressionType.NONE:
            metadata.compression = wire.CompressionType.ValueType(int(self.compression))
            metadata.uncompressed_size = len(payload)
            payload = compress(self.compression, payload)
        self._pending.append((futures, batch))
        try:
            self.session.send(wrap(send), encode_headers_and_payload(metadata, payload))
        except SessionError as exc:
            self._pending.pop()
            for future in futures:
                future.set_exception(exc)

    # -- the session's callbacks -----------------------------------------------------------------
    def on_receipt(self, receipt: wire.CommandSendReceipt) -> None:
        if not self._pending:
            return
        futures, batch = self._pending.popleft()
        stored = receipt.message_id
        for index, future in enumerate(futures):
            if future.done():
                continue
            message_id = wire.MessageIdData(ledger_id=stored.ledger_id, entry_id=stored.entry_id)
            if self._partition >= 0:
                message_id.partition = self._partition
            if batch:
                message_id.batch_index = index
                message_id.batch_size = len(futures)
            future.set_result(message_id)

    def on_send_error(self, error: wire.CommandSendError) -> None:
        if not self._pending:
            return
        futures, _ = self._pending.popleft()
        for future in futures:
            if not future.done():
                future.set_exception(SessionError(error.message, error.error))

    def on_closed(self, reason: str) -> None:
        """The broker closed this producer (storage refused a write, its grant was revoked, its
        topic moved) or the session ended: what was not receipted fails."""
        ended_here = not self.closed
        self.closed = True
        self.closed_reason = reason
        while self._pending:
            futures, _ = self._pending.popleft()
            for future in futures:
                if not future.done():
                    future.set_exception(SessionClosed(f"{reason}: the message may not be stored"))
        if ended_here:
            self.on_gone(reason)


def message_metadata(
    message: OutgoingMessage, producer_name: str, sequence_id: int, schema_version: bytes | None
) -> wire.MessageMetadata:
    """The metadata a client gives ``message`` (publish time now; ``deliverAfterMs`` from now)."""
    now = int(time.time() * 1000)
    metadata = wire.MessageMetadata(producer_name=producer_name, sequence_id=sequence_id, publish_time=now)
    for key, value in message.properties.items():
        metadata.properties.add(key=key, value=value)
    if message.key is not None:
        metadata.partition_key = message.key
        if message.key_b64:
            metadata.partition_key_b64_encoded = True
    if message.event_time:
        metadata.event_time = message.event_time
    if message.disable_replication:
        metadata.replicate_to.append(LOCAL_ONLY)
    elif message.replication_clusters is not None:
        metadata.replicate_to.extend(message.replication_clusters)
    if message.deliver_at:
        metadata.deliver_at_time = message.deliver_at
    elif message.deliver_after_ms:
        metadata.deliver_at_time = min(now + message.deliver_after_ms, INT64_MAX)
    if schema_version is not None:
        metadata.schema_version = schema_version
    return metadata


def batchable(message: OutgoingMessage) -> bool:
    """Whether ``message`` may share an entry: a batch's delivery time and replication are its
    entry's, so a delayed message or one routed for replication goes alone (as the Java client
    sends a delayed one)."""
    return not (
        message.deliver_at
        or message.deliver_after_ms
        or message.disable_replication
        or message.replication_clusters is not None
    )


def batch_entry(
    messages: list[OutgoingMessage], sequence_ids: list[int], producer_name: str, schema_version: bytes | None
) -> tuple[wire.MessageMetadata, bytes]:
    """One batch entry of ``messages``: the entry's metadata and its (uncompressed) payload of
    ``[size][SingleMessageMetadata][payload]`` per message, each with its own sequence id,
    properties, key and event time."""
    members = []
    for message, sequence_id in zip(messages, sequence_ids, strict=True):
        single = wire.SingleMessageMetadata(sequence_id=sequence_id)
        for key, value in message.properties.items():
            single.properties.add(key=key, value=value)
        if message.key is not None:
            single.partition_key = message.key
            if message.key_b64:
                single.partition_key_b64_encoded = True
        if message.event_time:
            single.event_time = message.event_time
        members.append((single, message.payload))
    now = int(time.time() * 1000)
    metadata = wire.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_ids[0],
        publish_time=now,
        num_messages_in_batch=len(messages),
    )
    if len(messages) > 1:
        metadata.highest_sequence_id = sequence_ids[-1]
    if schema_version is not None:
        metadata.schema_version = schema_version
    return metadata, encode_batch(members)
