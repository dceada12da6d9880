"""From each MESSAGE the broker sends to the messages the consumer hands out.

An entry is parsed and checked, decompressed and taken apart into its batch's messages, or
fed to the chunk assembler. Whatever the consumer does not hand out gives its flow permit back
at once: members of a batch already acknowledged, messages before the start, duplicates of
messages acknowledged but not yet flushed, chunks that do not complete a message (see
``chunks.py``), and corrupt entries, which are also acknowledged with the matching validation
error so that they are not redelivered for ever (all of a batch's permits, as the broker
charged them, or the window shrinks for good).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from magnetar.client.acknowledger import Acknowledger
from magnetar.client.chunks import ChunkAssembler, ChunkOutcome
from magnetar.client.columns import MessageColumns, entry_columns
from magnetar.client.compression import DecompressionError
from magnetar.client.decode import (
    Entry,
    chunk_of,
    counted_messages,
    expand,
    parse_entry,
    payload_view,
    uncompressed_payload,
)
from magnetar.client.message import ChunkMessageId, Message
from magnetar.client.receive_queue import FlowPermits, ReceiveQueue
from magnetar.client.redelivery import Redelivery
from magnetar.client.start_position import StartPosition
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import ChecksumMismatch, ProtocolError

log = logging.getLogger(__name__)

_ValidationError = wire.CommandAck


class Receiving(Protocol):
    """What the receiver reads of its consumer: where the entries come from, on which connection."""

    partition: int
    cnx_generation: int

    @property
    def name(self) -> str: ...

    def topic(self) -> str: ...


class EntryReceiver:
    """Takes the entries delivered to one consumer apart into the messages it queues."""

    def __init__(
        self,
        consumer: Receiving,
        chunks: ChunkAssembler,
        *,
        queue: ReceiveQueue[Message],
        flow: FlowPermits,
        acks: Acknowledger,
        redelivery: Redelivery,
        start: StartPosition,
    ) -> None:
        self._consumer = consumer
        self._chunks = chunks
        self._queue = queue
        self._flow = flow
        self._acks = acks
        self._redelivery = redelivery
        self._start = start
        #: A ColumnReader's queue: each entry goes there as one ``MessageColumns`` instead of its
        #: ``Message``s.
        self.columns: ReceiveQueue[MessageColumns] | None = None

    def receive(self, command: wire.CommandMessage, payload: memoryview) -> None:
        consumer = self._consumer
        try:
            entry = parse_entry(command, payload, consumer.partition, consumer.topic())
        except ChecksumMismatch:
            self._discard_unparsed(command.message_id, payload, _ValidationError.ChecksumMismatch)
            return
        except ProtocolError:
            self._discard_unparsed(command.message_id, payload, _ValidationError.BatchDeSerializeError)
            return
        self._flow.charged(entry.batch_size)
        if entry.is_chunk:
            if self._start.is_prior(entry.message_id):
                self._flow.increase(1)
            else:
                self._chunk(entry)
            return
        try:
            if self.columns is not None:  # an unbatched payload is kept as the frame's view (not copied)
                data: bytes | memoryview = payload_view(entry.metadata, entry.payload)
            else:
                data = uncompressed_payload(entry.metadata, entry.payload)
            messages = self._expand(entry, data)
        except DecompressionError:
            self._discard(command.message_id, _ValidationError.DecompressionError, entry.batch_size)
            return
        except ProtocolError:
            self._discard(command.message_id, _ValidationError.BatchDeSerializeError, entry.batch_size)
            return
        if entry.is_batch:
            self._acks.batches.delivered(entry.message_id, entry.batch_size, entry.unacked)
        self._deliver_all(messages, entry.batch_size if entry.is_batch else 1)

    def expire_chunks(self) -> None:
        """Drop the chunked messages incomplete for too long (from the consumer's timer)."""
        expiry = self._chunks.next_expiry_ms()
        if expiry is not None and _now_ms() > expiry:
            self._apply(self._chunks.expire(_now_ms()))

    def _chunk(self, entry: Entry) -> None:
        outcome = self._chunks.receive(chunk_of(entry), _now_ms())
        self._apply(outcome)
        if outcome.completed is None:
            return
        assembled = outcome.completed
        msg_id = ChunkMessageId(assembled.chunk_ids)
        try:
            data = uncompressed_payload(entry.metadata, assembled.payload)
        except DecompressionError:
            log.error(
                "%s: chunked message %s does not decompress; acknowledging it", self._consumer.name, msg_id
            )
            self._acks.ack_ids(assembled.chunk_ids)
            self._flow.increase(1)
            return
        del assembled.payload
        self._deliver_all(self._expand(entry, data, msg_id), 1)

    def _expand(
        self, entry: Entry, data: bytes | memoryview, chunk_id: ChunkMessageId | None = None
    ) -> list[Message] | MessageColumns:
        consumer = self._consumer
        if self.columns is not None:
            return entry_columns(
                entry.message_id,
                entry.metadata,
                entry.broker_metadata,
                data,
                consumer.cnx_generation,
                chunk_id,
                entry.unacked,
            )
        return expand(entry, bytes(data), consumer.topic(), consumer.cnx_generation, chunk_id)

    def _apply(self, outcome: ChunkOutcome) -> None:
        if outcome.ack:
            self._acks.ack_ids(outcome.ack)
        self._redelivery.later(outcome.redeliver)
        if outcome.permits:
            self._flow.increase(outcome.permits)

    def _deliver_all(self, messages: list[Message] | MessageColumns, permits_used: int) -> None:
        if isinstance(messages, MessageColumns):
            if self.columns is not None:  # always: only a columnar receiver makes columns
                self._deliver_columns(self.columns, messages, permits_used)
            return
        skipped = permits_used - len(messages)
        # ``messages`` are one entry's; an ack waiting to be sent covers an entry as a whole
        # (looked up by entry position), so one look-up answers for all of them
        if messages and self._acks.is_duplicate(messages[0].message_id()):
            self._flow.increase(permits_used)
            return
        for msg in messages:
            msg_id = msg.message_id()
            if self._start.is_prior(msg_id):
                skipped += 1
                continue
            self._queue.deliver(msg)
        if skipped > 0:
            self._flow.increase(skipped)

    def _deliver_columns(
        self, queue: ReceiveQueue[MessageColumns], cols: MessageColumns, permits_used: int
    ) -> None:
        """As ``_deliver_all``, for an entry's columns: queued as one item. The start skips a
        prefix of an entry at most, so only an entry that straddles it is looked at row by row."""
        n = len(cols)
        if n and self._acks.is_duplicate(cols.message_id(0)):
            self._flow.increase(permits_used)
            return
        if n and self._start.is_prior(cols.message_id(0)):
            if self._start.is_prior(cols.message_id(n - 1)):
                cols = cols.take([])
            else:
                cols = cols.take([i for i in range(n) if not self._start.is_prior(cols.message_id(i))])
        if len(cols):
            queue.deliver(cols)
        skipped = permits_used - len(cols)
        if skipped > 0:
            self._flow.increase(skipped)

    def _discard_unparsed(
        self,
        data: wire.MessageIdData,
        payload: memoryview,
        validation_error: wire.CommandAck.ValidationError.ValueType,
    ) -> None:
        messages = counted_messages(payload)
        self._flow.charged(messages)
        self._discard(data, validation_error, messages)

    def _discard(
        self,
        data: wire.MessageIdData,
        validation_error: wire.CommandAck.ValidationError.ValueType,
        messages: int,
    ) -> None:
        """Acknowledge an entry we cannot use and give back the permits the broker charged for it."""
        log.error("%s: discarding corrupt message %d:%d", self._consumer.name, data.ledger_id, data.entry_id)
        self._acks.discard(data, validation_error)
        self._flow.increase(messages)


def _now_ms() -> int:
    return int(time.time() * 1000)
