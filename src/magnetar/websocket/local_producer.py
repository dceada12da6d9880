"""A producer on one topic (or partition) of a session (``session.py``: in-process, or to the
worker that owns the topic).

It builds each message as a client does (``MessageMetadata`` with its sequence id, publish time,
properties, key, event time; the CRC32C checksum) and sends it unbatched, as Pulsar's WebSocket
producer does by default, or several as one batch entry (``send_batch``: each member's own
``SingleMessageMetadata``, as the Java client under Pulsar's WebSocket service batches them). The
broker answers each send with a receipt once the entry is on disk (or a SEND_ERROR), in the order
of the sends: ``send`` returns a future of the message id, ``send_batch`` one per member, whose
ids carry their ``batch_index`` and ``batch_size`` as the official clients' ids do.

Made with its ``Sessions`` (the WebSocket producer), it outlives the end of its topic there (the
bundle unloaded or moved, the owning worker killed): it attaches again at the topic's current
owner under the same producer name (``reconnect.py``), and what was sent and not receipted is sent
again with its sequence ids, so that the broker's deduplication, when on, stores it once (a copy
already stored is answered as a duplicate, with Pulsar's id ``-1:-1``). Without deduplication a
resend could store a message twice, so those sends are answered with an error instead: it may or
may not be stored. Sends that arrive meanwhile wait, and go in order once the producer is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.broker.errors import BrokerError
from magnetar.protocol import wire
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.commands import wrap
from magnetar.protocol.compression import CompressionType, compress
from magnetar.protocol.headers import encode_headers_and_payload
from magnetar.protocol.message_id import INT64_MAX
from magnetar.protocol.topic_name import TopicName
from magnetar.websocket.json_shapes import OutgoingMessage
from magnetar.websocket.reconnect import again
from magnetar.websocket.session import LocalSession, SessionClosed, SessionError

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.websocket.sessions import Sessions

log = logging.getLogger(__name__)

#: What ``replicate_to`` holds for a message kept in the local cluster (Pulsar's ``__local__``).
LOCAL_ONLY = "__local__"


@dataclass(slots=True)
class _Entry:
    """One entry sent (or waiting to be) and not yet answered."""

    futures: list[asyncio.Future[wire.MessageIdData]]
    batch: bool
    send: wire.CommandSend
    data: bytes
    #: Handed to a broker that may have stored it before it went away.
    sent: bool = False


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
        #: The entries sent and not yet answered, in the order of their sends.
        self._pending: deque[_Entry] = deque()
        self.closed = False
        #: Why the producer ended when the broker ended it (CLOSE_PRODUCER, the session closed).
        self.closed_reason = ""
        self._partition = topic.partition_index
        #: Called when the broker ends the producer for good (not when its owner closes it).
        self.on_gone: Callable[[str], None] = lambda reason: None
        #: Where it attaches again when its topic goes away there (None: it ends instead).
        self._sessions: Sessions | None = None
        self._schema: wire.Schema | None = None
        self._moving: asyncio.Task[None] | None = None

    @classmethod
    async def create(
        cls,
        session: LocalSession,
        topic: TopicName,
        name: str | None = None,
        schema: wire.Schema | None = None,
        initial_sequence_id: int | None = None,
        compression: CompressionType = CompressionType.NONE,
        sessions: Sessions | None = None,
    ) -> LocalProducer:
        """PRODUCER on ``topic``; SessionError as the broker refuses it (AuthorizationError,
        ProducerBusy, TopicTerminatedError, IncompatibleSchema ...). With ``sessions``, it
        attaches again wherever ``topic`` goes."""
        producer_id, reply = await _attach(session, topic, name, schema)
        last = reply.last_sequence_id
        if initial_sequence_id is not None:
            last = max(last, initial_sequence_id)
        version = reply.schema_version if reply.HasField("schema_version") else None
        producer = cls(session, topic, producer_id, reply.producer_name, last, version, compression)
        producer._sessions = sessions
        producer._schema = schema
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
        entry = _Entry(futures, batch, send, encode_headers_and_payload(metadata, payload))
        self._pending.append(entry)
        if self._moving is not None:
            return  # it goes once the producer is attached again
        try:
            self._push(entry)
        except SessionError as exc:
            if self._sessions is not None:
                self.on_closed(str(exc))  # the session ended and has not said so yet
                return
            self._pending.pop()
            for future in futures:
                future.set_exception(exc)

    def _push(self, entry: _Entry) -> None:
        if entry.send.producer_id != self.producer_id:  # sent again, by the producer attached again
            entry.send.producer_id = self.producer_id
        self.session.send(wrap(entry.send), entry.data)
        entry.sent = True

    # -- the session's callbacks -----------------------------------------------------------------
    def on_receipt(self, receipt: wire.CommandSendReceipt) -> None:
        if not self._pending:
            return
        entry = self._pending.popleft()
        stored = receipt.message_id
        for index, future in enumerate(entry.futures):
            if future.done():
                continue
            message_id = wire.MessageIdData(ledger_id=stored.ledger_id, entry_id=stored.entry_id)
            if self._partition >= 0:
                message_id.partition = self._partition
            if entry.batch:
                message_id.batch_index = index
                message_id.batch_size = len(entry.futures)
            future.set_result(message_id)

    def on_send_error(self, error: wire.CommandSendError) -> None:
        if not self._pending:
            return
        entry = self._pending.popleft()
        for future in entry.futures:
            if not future.done():
                future.set_exception(SessionError(error.message, error.error))

    def on_closed(self, reason: str) -> None:
        """The broker closed this producer (storage refused a write, its grant was revoked, its
        topic moved) or the session ended: it attaches again if it can, else what was not
        receipted fails."""
        if self.closed or self._moving is not None:
            return
        if self._sessions is None:
            self._end(reason)
            return
        log.info("producer %s on %s: %s; attaching again", self.name, self.topic, reason)
        self._moving = asyncio.get_running_loop().create_task(self._move(reason))

    async def _move(self, reason: str) -> None:
        try:
            await again(self._reattach, reason)
        except SessionError as exc:
            self._moving = None
            self._end(str(exc))

    async def _reattach(self) -> None:
        """PRODUCER again under the same name at the topic's owner; then the pending entries go
        again (or fail, where a resend could store a message twice)."""
        assert self._sessions is not None
        session = await self._sessions.for_topic(self.topic)
        producer_id, reply = await _attach(session, self.topic, self.name, self._schema)
        if session.closed:
            raise SessionClosed(session.close_reason)
        self.session, self.producer_id = session, producer_id
        self._next_sequence_id = max(self._next_sequence_id, reply.last_sequence_id + 1)
        session.add_producer(producer_id, self)
        self._moving = None
        resend = deduplicated(self._sessions.service, self.topic)
        pending, self._pending = self._pending, deque()
        for entry in pending:
            if entry.sent and not resend:
                error = SessionError(
                    "the topic moved before this message was receipted: it may or may not be stored"
                    " (deduplication is off, so it was not sent again)",
                    wire.ServiceNotReady,
                )
                for future in entry.futures:
                    if not future.done():
                        future.set_exception(error)
                continue
            self._pending.append(entry)
            self._push(entry)
        log.info(
            "producer %s on %s attached again, %d sends resent", self.name, self.topic, len(self._pending)
        )

    def _end(self, reason: str) -> None:
        self.closed = True
        self.closed_reason = reason
        while self._pending:
            for future in self._pending.popleft().futures:
                if not future.done():
                    future.set_exception(SessionClosed(f"{reason}: the message may not be stored"))
        self.on_gone(reason)

    def close(self) -> None:
        """Stop attaching again (the owner closes the session, which drops the broker's producer)."""
        self.closed = True
        if self._moving is not None:
            self._moving.cancel()
            self._moving = None


async def _attach(
    session: LocalSession, topic: TopicName, name: str | None, schema: wire.Schema | None
) -> tuple[int, wire.CommandProducerSuccess]:
    producer_id = session.new_id()
    request_id = session.new_request_id()
    command = wire.CommandProducer(topic=str(topic), producer_id=producer_id, request_id=request_id)
    if name:
        command.producer_name = name
    if schema is not None:
        command.schema.CopyFrom(schema)
    return producer_id, await session.request(wrap(command), request_id)


def deduplicated(service: BrokerService, topic: TopicName) -> bool:
    """Whether the broker deduplicates ``topic``'s messages (its namespace's policy, else the
    broker's setting): a send to it may safely go twice."""
    if not topic.persistent:
        return False
    try:
        policy = service.namespaces.policies(topic.namespace_name).deduplication_enabled
    except (BrokerError, LookupError, ValueError):
        policy = None
    return service.config.deduplication_enabled if policy is None else policy


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
