"""From a delivered entry to the messages a WebSocket consumer sends on (no I/O).

An entry is one message, a batch (one message id per member: ``batch_index`` and ``batch_size``,
as the official clients serialize a batch message's id), or one chunk of a chunked message (put
together by ``ChunkAssembly``, whose message id names the last chunk with the first one in
``first_chunk_message_id``, as Pulsar's ``ChunkMessageIdImpl``). Compressed payloads are
decompressed; a batch's members already acknowledged (its ack set) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.protocol import wire
from magnetar.protocol.batch import iter_batch
from magnetar.protocol.compression import decompress
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata, verify_checksum
from magnetar.websocket.json_shapes import IncomingMessage

#: Chunked messages put together at once per consumer; an older incomplete one is dropped.
MAX_PENDING_CHUNKED = 100


@dataclass(slots=True)
class Entry:
    """An entry's messages, and what acknowledging them means for the broker."""

    ledger_id: int
    entry_id: int
    messages: list[IncomingMessage]
    #: Batch size (0: not a batch).
    batch_size: int = 0
    #: The chunk's metadata and its share of the payload, when the entry is one chunk of a
    #: chunked message.
    chunk: wire.MessageMetadata | None = None
    chunk_data: bytes = b""


def unacked_indexes(ack_set: list[int]) -> set[int] | None:
    """The batch indexes an ack set leaves unacknowledged (None: no ack set, all are)."""
    if not ack_set:
        return None
    bits = set()
    for word_no, word in enumerate(ack_set):
        word &= (1 << 64) - 1
        while word:
            low = word & -word
            bits.add(word_no * 64 + low.bit_length() - 1)
            word ^= low
    return bits


def parse_entry(
    ledger_id: int,
    entry_id: int,
    partition: int,
    payload: memoryview,
    redelivery_count: int,
    ack_set: list[int],
) -> Entry:
    """ProtocolError (ChecksumMismatch, DecompressionError ...) for bytes that do not decode."""
    _, rest = split_entry_metadata(payload)
    verify_checksum(rest)
    metadata, body = parse_metadata(rest)
    if metadata.num_chunks_from_msg > 1 and not metadata.HasField("num_messages_in_batch"):
        return Entry(ledger_id, entry_id, [], chunk=metadata, chunk_data=bytes(body))
    data = (
        decompress(metadata.compression, body, metadata.uncompressed_size)
        if metadata.compression
        else bytes(body)
    )
    base = wire.MessageIdData(ledger_id=ledger_id, entry_id=entry_id)
    if partition >= 0:
        base.partition = partition
    properties = {kv.key: kv.value for kv in metadata.properties}
    if not metadata.HasField("num_messages_in_batch"):
        message = IncomingMessage(
            base,
            data,
            properties,
            metadata.publish_time,
            redelivery_count,
            metadata.event_time,
            metadata.partition_key if metadata.HasField("partition_key") else None,
        )
        return Entry(ledger_id, entry_id, [message])
    size = metadata.num_messages_in_batch
    unacked = unacked_indexes(ack_set)
    messages = []
    for index, (single, member) in enumerate(iter_batch(data, size)):
        if (unacked is not None and index not in unacked) or single.compacted_out:
            continue
        message_id = wire.MessageIdData()
        message_id.CopyFrom(base)
        message_id.batch_index = index
        message_id.batch_size = size
        messages.append(
            IncomingMessage(
                message_id,
                bytes(member),
                {kv.key: kv.value for kv in single.properties},
                metadata.publish_time,
                redelivery_count,
                single.event_time,
                single.partition_key if single.HasField("partition_key") else None,
            )
        )
    return Entry(ledger_id, entry_id, messages, batch_size=size)


@dataclass(slots=True)
class _Pending:
    parts: list[bytes] = field(default_factory=list)
    positions: list[tuple[int, int]] = field(default_factory=list)


class ChunkAssembly:
    """The chunks of chunked messages, by uuid, until each is whole."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}

    def add(
        self, entry: Entry, partition: int, redelivery_count: int
    ) -> tuple[IncomingMessage, list[tuple[int, int]]] | None:
        """The whole message and the positions of its chunks once ``entry`` completes it, else None.
        A chunk out of order starts nothing (its message is incomplete: dropped, as Pulsar's
        client drops it)."""
        meta = entry.chunk
        assert meta is not None
        pending = self._pending.get(meta.uuid)
        if meta.chunk_id == 0:
            if len(self._pending) >= MAX_PENDING_CHUNKED:
                self._pending.pop(next(iter(self._pending)))
            pending = self._pending[meta.uuid] = _Pending()
        elif pending is None or len(pending.parts) != meta.chunk_id:
            self._pending.pop(meta.uuid, None)
            return None
        pending.parts.append(entry.chunk_data)
        pending.positions.append((entry.ledger_id, entry.entry_id))
        if len(pending.parts) < meta.num_chunks_from_msg:
            return None
        del self._pending[meta.uuid]
        data = b"".join(pending.parts)
        if meta.compression:
            data = decompress(meta.compression, data, meta.uncompressed_size)
        first_ledger, first_entry = pending.positions[0]
        message_id = wire.MessageIdData(ledger_id=entry.ledger_id, entry_id=entry.entry_id)
        first = wire.MessageIdData(ledger_id=first_ledger, entry_id=first_entry)
        if partition >= 0:
            message_id.partition = partition
            first.partition = partition
        message_id.first_chunk_message_id.CopyFrom(first)
        message = IncomingMessage(
            message_id,
            data,
            {kv.key: kv.value for kv in meta.properties},
            meta.publish_time,
            redelivery_count,
            meta.event_time,
            meta.partition_key if meta.HasField("partition_key") else None,
        )
        return message, pending.positions
