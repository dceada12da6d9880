"""The read schema, and messages turned into Arrow record batches that match it exactly."""

from __future__ import annotations

import array
import itertools
from collections.abc import Sequence
from functools import cache

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from magnetar.client import ChunkMessageId, Message, MessageColumns, MessageId

READ_SCHEMA = StructType(
    [
        StructField("key", StringType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("message_id", BinaryType()),
        StructField("publish_time", TimestampType()),
        StructField("event_time", TimestampType()),
        StructField("broker_publish_time", TimestampType()),
        StructField("properties", MapType(StringType(), StringType())),
    ]
)


@cache
def arrow_schema() -> pa.Schema:
    """What Spark expects from ``read()``: its own conversion of READ_SCHEMA, timestamps in UTC."""
    return to_arrow_schema(READ_SCHEMA, timezone="UTC")


#: The scalars ``_timestamps`` computes with, made once: pyarrow converts a Python value to a
#: scalar by trying to import ``dateutil`` (absent here, so looked for on every call through
#: ``sys.path``), which was an eighth of a 100 KB read's time in a Spark worker.
_ZERO = pa.scalar(0, pa.int64())
_THOUSAND = pa.scalar(1000, pa.int64())
_TRUE = pa.scalar(True)


@cache
def _null_of(type_: pa.DataType) -> pa.Scalar:
    return pa.scalar(None, type=type_)


def _timestamps(ms: Sequence[int | None], field: pa.Field) -> pa.Array:
    """Milliseconds (0 or None: unset) as the field's microsecond timestamps, in bulk."""
    millis = pa.array(ms, type=pa.int64())
    unset = pc.fill_null(pc.equal(millis, _ZERO), _TRUE)
    micros = pc.multiply(millis, _THOUSAND).cast(field.type)
    return pc.if_else(unset, _null_of(field.type), micros)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: A batch index's protobuf tag in MessageIdData (field 4, varint), and the bytes of the small ones.
_BATCH_INDEX_TAG = 4 << 3
_BATCH_SIZE_TAG = 6 << 3
_SMALL_BATCH_INDEX = [bytes((_BATCH_INDEX_TAG,)) + _varint(i) for i in range(4096)]


#: Default of the bytesPerBatch option: far below Arrow's 2 GiB per binary array, and small enough
#: that a task's Python worker holds a few of them at most. Under glibc's largest mmap threshold
#: (32 MiB) too: a batch's joined values then reuse freed heap memory, where 64 MiB batches got
#: fresh pages from the kernel each time and their page faults made joining them ten times slower.
DEFAULT_BYTES_PER_BATCH = 16 * 1024 * 1024


class RecordBatchBuilder:
    """Collects messages of one topic partition column by column, until ``max_rows`` rows or
    ``max_bytes`` of values, keys and properties: a batch bounded by bytes keeps the worker's
    memory bounded and every binary column under Arrow's 2 GiB (past it, ``pa.array`` returns a
    ChunkedArray that a RecordBatch cannot hold).

    Rows come as a client's ``MessageColumns`` (``add_columns``: whole entries, so the last one
    may pass the byte limit, and rows past ``max_rows`` wait for the next build) or one
    ``Message`` at a time (``add``)."""

    def __init__(
        self, topic: str, partition: int, max_rows: int = 10_000, max_bytes: int = DEFAULT_BYTES_PER_BATCH
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._rows = MessageColumns(topic, partition)
        self.nbytes = 0

    @property
    def full(self) -> bool:
        """Whether the batch has reached either limit: build it before adding more."""
        return len(self._rows) >= self.max_rows or self.nbytes >= self.max_bytes

    @property
    def room(self) -> tuple[int, int]:
        """(rows, bytes) still to fill before the batch is full."""
        return self.max_rows - len(self._rows), self.max_bytes - self.nbytes

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, msg: Message) -> None:
        rows = self._rows
        msg_id = msg.message_id()
        rows.payloads.append(msg.data())
        rows.keys.append(msg.partition_key())
        rows.properties.append(msg.properties())
        rows.indexes.append(msg.index())
        rows.publish_times.append(msg.publish_timestamp())
        rows.event_times.append(msg.event_timestamp())
        rows.broker_publish_times.append(msg.broker_publish_time())
        rows.ledger_ids.append(msg_id.ledger_id())
        rows.entry_ids.append(msg_id.entry_id())
        rows.batch_indexes.append(msg_id.batch_index())
        rows.batch_sizes.append(msg_id.batch_size())
        rows.chunk_ids.append(msg_id if isinstance(msg_id, ChunkMessageId) else None)
        self.nbytes += _nbytes(rows.payloads[-1:], rows.keys[-1:], rows.properties[-1:])
        self._id_partition = msg_id.partition()

    def add_columns(self, cols: MessageColumns) -> None:
        self._rows.extend(cols)
        self._id_partition = cols.partition
        self.nbytes += _nbytes(cols.payloads, cols.keys, cols.properties)

    def build(self) -> pa.RecordBatch:
        """The rows added since the last build (``max_rows`` of them at most), as one record batch."""
        rows = self._rows
        if len(rows) > self.max_rows:
            rest = rows.slice(self.max_rows)
            rows = rows.slice(0, self.max_rows)
            self._rows = rest
            self.nbytes = _nbytes(rest.payloads, rest.keys, rest.properties)
        else:
            self._rows = MessageColumns(self.topic, self.partition)
            self.nbytes = 0
        schema = arrow_schema()
        n = len(rows)
        listed = {
            "key": rows.keys,
            "topic": [self.topic] * n,
            "partition": [self.partition] * n,
            "offset": rows.indexes,
            "message_id": serialized_ids(rows, getattr(self, "_id_partition", self.partition)),
            "properties": rows.properties,
        }
        arrays = {name: pa.array(values, type=schema.field(name).type) for name, values in listed.items()}
        arrays["value"] = binary_array(rows.payloads)
        times: tuple[Sequence[int | None], ...] = (
            rows.publish_times,
            rows.event_times,
            rows.broker_publish_times,
        )
        for name, values in zip(_TIMESTAMPS, times, strict=True):
            arrays[name] = _timestamps(values, schema.field(name))
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)


#: Offsets of Arrow's binary type are 32-bit: past this, ``pa.array`` splits the values.
_MAX_BINARY_BYTES = 2**31 - 1


def binary_array(values: Sequence[bytes | memoryview]) -> pa.Array:
    """``values`` as an Arrow binary array made from two buffers: their bytes joined (one
    copy, sized up front) and their offsets. ``pa.array`` appends value by value into a growing
    buffer, which for 100 KB values was most of a task's time."""
    total = sum(map(len, values))
    if total > _MAX_BINARY_BYTES:
        return pa.array(values, type=pa.binary())
    offsets = array.array("i", (0,))
    offsets.extend(itertools.accumulate(map(len, values)))
    data = pa.py_buffer(b"".join(values))
    return pa.Array.from_buffers(pa.binary(), len(values), [None, pa.py_buffer(offsets), data])


def _nbytes(
    values: Sequence[bytes | memoryview], keys: list[str | None], properties: list[dict[str, str]]
) -> int:
    """What the byte limit counts: values, keys and properties (names and values)."""
    total = sum(map(len, values)) + sum(len(k) for k in keys if k)
    for props in properties:
        if props:
            total += sum(map(len, props)) + sum(map(len, props.values()))
    return total


def serialized_ids(rows: MessageColumns, partition: int) -> list[bytes]:
    """Each row's ``MessageId.serialize()``, made from the id columns. Members of one batch
    entry differ only in the batch index, which protobuf writes between the entry's fields
    (ledger, entry, partition: numbers 1-3) and its batch size (6): the bytes before and after
    it are made once per entry (serializing each id from scratch was a third of the read time)."""
    out: list[bytes] = []
    last: tuple[int, int, int] | None = None
    before = after = b""
    ids = zip(
        rows.ledger_ids, rows.entry_ids, rows.batch_indexes, rows.batch_sizes, rows.chunk_ids, strict=True
    )
    for ledger, entry, index, size, chunk in ids:
        if chunk is not None:
            out.append(chunk.serialize())
            continue
        if (ledger, entry, size) != last:
            last = (ledger, entry, size)
            before, after = _around_batch_index(MessageId(partition, ledger, entry, -1, size))
        if index < 0:
            out.append(before + after)
        else:
            tagged = (
                _SMALL_BATCH_INDEX[index] if index < 4096 else bytes((_BATCH_INDEX_TAG,)) + _varint(index)
            )
            out.append(before + tagged + after)
    return out


_TIMESTAMPS = ("publish_time", "event_time", "broker_publish_time")


def _around_batch_index(msg_id: MessageId) -> tuple[bytes, bytes]:
    """The serialized id's bytes before its batch index field (ledger, entry, partition) and
    after it (the batch size, field 6, a varint: the last field ``MessageId.to_proto`` sets)."""
    before = msg_id.to_proto(with_batch=False).SerializeToString()
    size = msg_id.batch_size()
    return before, (bytes((_BATCH_SIZE_TAG,)) + _varint(size) if size else b"")
