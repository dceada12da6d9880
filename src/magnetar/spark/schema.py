"""The read schema, and messages turned into Arrow record batches that match it exactly."""

from __future__ import annotations

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

from magnetar.client import Message, MessageId

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


def _timestamps(ms: list[int | None], field: pa.Field) -> pa.Array:
    """Milliseconds (0 or None: unset) as the field's microsecond timestamps, in bulk."""
    millis = pa.array(ms, type=pa.int64())
    unset = pc.fill_null(pc.equal(millis, 0), True)
    micros = pc.multiply(millis, 1000).cast(field.type)
    return pc.if_else(unset, pa.scalar(None, type=field.type), micros)


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
#: that a task's Python worker holds a few of them at most.
DEFAULT_BYTES_PER_BATCH = 64 * 1024 * 1024


class RecordBatchBuilder:
    """Collects messages of one topic partition column by column, until ``max_rows`` rows or
    ``max_bytes`` of values, keys and properties: a batch bounded by bytes keeps the worker's
    memory bounded and every binary column under Arrow's 2 GiB (past it, ``pa.array`` returns a
    ChunkedArray that a RecordBatch cannot hold)."""

    def __init__(
        self, topic: str, partition: int, max_rows: int = 10_000, max_bytes: int = DEFAULT_BYTES_PER_BATCH
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._entry: tuple[int, int, int, int] | None = None
        self._entry_bytes = (b"", b"")
        self._reset()

    def _reset(self) -> None:
        self._key: list[str | None] = []
        self._value: list[bytes] = []
        self._offset: list[int] = []
        self._message_id: list[bytes] = []
        self._publish: list[int] = []
        self._event: list[int] = []
        self._broker: list[int | None] = []
        self._properties: list[dict[str, str]] = []
        self.nbytes = 0

    @property
    def full(self) -> bool:
        """Whether the batch has reached either limit: build it before adding more."""
        return len(self._value) >= self.max_rows or self.nbytes >= self.max_bytes

    def __len__(self) -> int:
        return len(self._value)

    def add(self, msg: Message) -> None:
        key = msg.partition_key()
        value = msg.data()
        properties = msg.properties()
        self._key.append(key)
        self._value.append(value)
        self._offset.append(msg.index())
        self._message_id.append(self._serialized_id(msg.message_id()))
        self._publish.append(msg.publish_timestamp())  # milliseconds: microseconds in bulk at build
        self._event.append(msg.event_timestamp())
        self._broker.append(msg.broker_publish_time())
        self._properties.append(properties)
        self.nbytes += len(value) + (len(key) if key else 0)
        if properties:
            self.nbytes += sum(map(len, properties)) + sum(map(len, properties.values()))

    def _serialized_id(self, msg_id: MessageId) -> bytes:
        """``msg_id.serialize()``. Members of one batch entry differ only in the batch index,
        which protobuf writes between the entry's fields (ledger, entry, partition: numbers 1-3)
        and its batch size (6): the entry's bytes before and after it are made once per entry
        (serializing each id from scratch was a third of the read time)."""
        if type(msg_id) is not MessageId:
            return msg_id.serialize()
        index = msg_id.batch_index()
        if index < 0:
            return msg_id.serialize()
        entry = (msg_id.ledger_id(), msg_id.entry_id(), msg_id.partition(), msg_id.batch_size())
        if entry != self._entry:
            self._entry = entry
            self._entry_bytes = _around_batch_index(msg_id)
        before, after = self._entry_bytes
        tagged = _SMALL_BATCH_INDEX[index] if index < 4096 else bytes((_BATCH_INDEX_TAG,)) + _varint(index)
        return before + tagged + after

    def build(self) -> pa.RecordBatch:
        """The rows added since the last build, as one record batch."""
        schema = arrow_schema()
        n = len(self)
        columns = [
            self._key,
            self._value,
            [self.topic] * n,
            [self.partition] * n,
            self._offset,
            self._message_id,
            self._properties,
        ]
        fields = [f for f in schema if f.name not in _TIMESTAMPS]
        arrays = {f.name: pa.array(values, type=f.type) for values, f in zip(columns, fields, strict=True)}
        for name, values in zip(_TIMESTAMPS, (self._publish, self._event, self._broker), strict=True):
            arrays[name] = _timestamps(values, schema.field(name))
        self._reset()
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)


_TIMESTAMPS = ("publish_time", "event_time", "broker_publish_time")


def _around_batch_index(msg_id: MessageId) -> tuple[bytes, bytes]:
    """The serialized id's bytes before its batch index field (ledger, entry, partition) and
    after it (the batch size, field 6, a varint: the last field ``MessageId.to_proto`` sets)."""
    before = msg_id.to_proto(with_batch=False).SerializeToString()
    size = msg_id.batch_size()
    return before, (bytes((_BATCH_SIZE_TAG,)) + _varint(size) if size else b"")
