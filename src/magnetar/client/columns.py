"""Messages as columns: an entry's messages taken apart in bulk, with no object per message.

A ``ColumnReader`` (``column_reader.py``) queues one ``MessageColumns`` per entry (or per
completed chunked message) instead of one ``Message`` and ``MessageId`` per message: for small
batched messages those objects were most of a reader's time. A batched entry is parsed once
and its members become slices of its payload; the entry-wide fields are shared. The payload of
an uncompressed message that is not batched stays a view of the frame it came in (a
``memoryview``, read-only or not): the reader that turns it into bytes (Arrow's buffer) copies
it once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.client.message import ChunkMessageId, MessageId
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.batch import iter_batch_reused


@dataclass(slots=True)
class MessageColumns:
    """Messages of one topic partition, one list per field, row ``i`` of each for message ``i``.

    A message's id is (``ledger_ids[i]``, ``entry_ids[i]``, ``batch_indexes[i]`` (-1: not
    batched), ``batch_sizes[i]`` (0: not batched)) on ``partition``; a chunked message (whole,
    assembled) has its ``ChunkMessageId`` in ``chunk_ids[i]`` (None for the others), and its
    ledger and entry are those of its last chunk. ``indexes[i]`` is the broker's index of the
    message (PIP 70; None when the broker sends none), times are milliseconds (publish: always
    set; event: 0 when not set; broker: None when the broker sends none).
    """

    topic: str | None
    partition: int
    payloads: list[bytes | memoryview] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    properties: list[dict[str, str]] = field(default_factory=list)
    publish_times: list[int] = field(default_factory=list)
    event_times: list[int] = field(default_factory=list)
    broker_publish_times: list[int | None] = field(default_factory=list)
    indexes: list[int | None] = field(default_factory=list)
    ledger_ids: list[int] = field(default_factory=list)
    entry_ids: list[int] = field(default_factory=list)
    batch_indexes: list[int] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    chunk_ids: list[ChunkMessageId | None] = field(default_factory=list)
    #: The client connection generation the rows came on (their flow permits belong to it).
    cnx_generation: int = 0

    def __len__(self) -> int:
        return len(self.payloads)

    @property
    def nbytes(self) -> int:
        """Bytes of the payloads (what a byte limit counts)."""
        return sum(map(len, self.payloads))

    def message_id(self, i: int = 0) -> MessageId:
        """Row ``i``'s id as a MessageId (or ChunkMessageId); made on demand, not kept."""
        chunk = self.chunk_ids[i]
        if chunk is not None:
            return chunk
        return MessageId(
            self.partition,
            self.ledger_ids[i],
            self.entry_ids[i],
            self.batch_indexes[i],
            self.batch_sizes[i],
            self.topic,
        )

    def last_message_id(self) -> MessageId:
        return self.message_id(len(self) - 1)

    def extend(self, other: MessageColumns) -> None:
        """Append ``other``'s rows (same topic partition)."""
        for name in _LISTS:
            getattr(self, name).extend(getattr(other, name))

    def slice(self, start: int, stop: int | None = None) -> MessageColumns:
        """Rows ``start`` to ``stop`` (None: the end) as new columns."""
        out = MessageColumns(self.topic, self.partition, cnx_generation=self.cnx_generation)
        for name in _LISTS:
            setattr(out, name, getattr(self, name)[start:stop])
        return out

    def take(self, rows: list[int]) -> MessageColumns:
        """The rows at ``rows``, in that order, as new columns."""
        out = MessageColumns(self.topic, self.partition, cnx_generation=self.cnx_generation)
        for name in _LISTS:
            values = getattr(self, name)
            setattr(out, name, [values[i] for i in rows])
        return out


_LISTS = (
    "payloads",
    "keys",
    "properties",
    "publish_times",
    "event_times",
    "broker_publish_times",
    "indexes",
    "ledger_ids",
    "entry_ids",
    "batch_indexes",
    "batch_sizes",
    "chunk_ids",
)


def entry_columns(
    msg_id: MessageId,
    meta: wire.MessageMetadata,
    broker: wire.BrokerEntryMetadata | None,
    data: bytes | memoryview,
    generation: int,
    chunk_id: ChunkMessageId | None = None,
    unacked: set[int] | None = None,
) -> MessageColumns:
    """The columns of one entry whose payload ``data`` is decompressed: one row, or one per
    batch member still unacknowledged (``unacked``, None: all) and not compacted out."""
    index = broker.index if broker is not None and broker.HasField("index") else None
    broker_time = (
        broker.broker_timestamp if broker is not None and broker.HasField("broker_timestamp") else None
    )
    cols = MessageColumns(msg_id.topic_name(), msg_id.partition(), cnx_generation=generation)
    ledger, entry = msg_id.ledger_id(), msg_id.entry_id()
    if not meta.HasField("num_messages_in_batch"):
        cols.payloads.append(data)
        cols.keys.append(meta.partition_key if meta.HasField("partition_key") else None)
        cols.properties.append({kv.key: kv.value for kv in meta.properties})
        cols.event_times.append(meta.event_time)
        cols.indexes.append(index)
        cols.batch_indexes.append(-1)
        cols.batch_sizes.append(0)
        cols.chunk_ids.append(chunk_id)
        count = 1
    else:
        size = meta.num_messages_in_batch
        first_index = index - size + 1 if index is not None else None
        payloads, keys, props, events, indexes, batch = (
            cols.payloads,
            cols.keys,
            cols.properties,
            cols.event_times,
            cols.indexes,
            cols.batch_indexes,
        )
        for i, (single, payload) in enumerate(iter_batch_reused(data, size)):
            if (unacked is not None and i not in unacked) or single.compacted_out:
                continue
            payloads.append(bytes(payload))
            keys.append(single.partition_key if single.HasField("partition_key") else None)
            props.append({kv.key: kv.value for kv in single.properties} if single.properties else {})
            events.append(single.event_time)
            batch.append(i)
        count = len(payloads)
        if first_index is None:
            indexes.extend([None] * count)
        elif count == size:
            indexes.extend(range(first_index, first_index + size))
        else:
            indexes.extend([first_index + i for i in batch])
        cols.batch_sizes = [size] * count
        cols.chunk_ids = [None] * count
    cols.publish_times = [meta.publish_time] * count
    cols.broker_publish_times = [broker_time] * count
    cols.ledger_ids = [ledger] * count
    cols.entry_ids = [entry] * count
    return cols
