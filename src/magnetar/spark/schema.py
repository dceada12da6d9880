"""The read schema, and messages turned into Arrow record batches that match it exactly."""

from __future__ import annotations

from functools import cache

import pyarrow as pa
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


def _micros(ms: int | None) -> int | None:
    return None if not ms else ms * 1000


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
        self._entry_proto = None
        self._reset()

    def _reset(self) -> None:
        self._key: list[str | None] = []
        self._value: list[bytes] = []
        self._offset: list[int] = []
        self._message_id: list[bytes] = []
        self._publish: list[int | None] = []
        self._event: list[int | None] = []
        self._broker: list[int | None] = []
        self._properties: list[list[tuple[str, str]]] = []
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
        self._publish.append(_micros(msg.publish_timestamp()))
        self._event.append(_micros(msg.event_timestamp()))
        self._broker.append(_micros(msg.broker_publish_time()))
        self._properties.append(list(properties.items()))
        self.nbytes += len(value) + (len(key) if key else 0)
        if properties:
            self.nbytes += sum(len(k) + len(v) for k, v in properties.items())

    def _serialized_id(self, msg_id: MessageId) -> bytes:
        """``msg_id.serialize()``; members of one batch entry share a proto, only the batch index
        changes (serializing each id from scratch was a third of the read time)."""
        if type(msg_id) is not MessageId or msg_id.batch_index() < 0:
            return msg_id.serialize()
        entry = (msg_id.ledger_id(), msg_id.entry_id(), msg_id.partition(), msg_id.batch_size())
        if entry != self._entry:
            self._entry = entry
            self._entry_proto = msg_id.to_proto()
        self._entry_proto.batch_index = msg_id.batch_index()
        return self._entry_proto.SerializeToString()

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
            self._publish,
            self._event,
            self._broker,
            self._properties,
        ]
        arrays = [pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
