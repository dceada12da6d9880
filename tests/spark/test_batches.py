"""Record batches cut by rows and by bytes: pure, no Spark session, no broker."""

from __future__ import annotations

import pyarrow as pa
import pytest

from magnetar.client import ChunkMessageId, Message, MessageColumns, MessageId
from magnetar.spark.options import ReadOptions
from magnetar.spark.schema import DEFAULT_BYTES_PER_BATCH, RecordBatchBuilder, arrow_schema, binary_array

TOPIC = "persistent://public/default/t"


def message(i: int, size: int) -> Message:
    return Message(
        bytes([i % 256]) * size,
        MessageId(partition=-1, ledger_id=1, entry_id=i),
        topic=TOPIC,
        partition_key="k",
        properties={"i": str(i)},
        index=i,
    )


def fill(builder: RecordBatchBuilder, messages: list[Message]) -> list[int]:
    """Rows per built batch when ``messages`` are added until the builder is full, as a task does."""
    sizes = []
    for msg in messages:
        builder.add(msg)
        if builder.full:
            sizes.append(builder.build().num_rows)
    if len(builder):
        sizes.append(builder.build().num_rows)
    return sizes


def test_batches_are_cut_by_bytes_before_rows():
    builder = RecordBatchBuilder(TOPIC, -1, max_rows=100, max_bytes=2500)
    # 1000-byte values (+ key and property bytes): the third one passes 2500 bytes
    assert fill(builder, [message(i, 1000) for i in range(7)]) == [3, 3, 1]
    assert builder.nbytes == 0 and len(builder) == 0  # build starts afresh


def test_batches_are_cut_by_rows_when_values_are_small():
    builder = RecordBatchBuilder(TOPIC, -1, max_rows=4, max_bytes=1 << 20)
    assert fill(builder, [message(i, 10) for i in range(10)]) == [4, 4, 2]


def test_a_value_larger_than_the_limit_is_a_batch_of_its_own():
    builder = RecordBatchBuilder(TOPIC, -1, max_rows=100, max_bytes=100)
    messages = [message(0, 10), message(1, 5000), message(2, 10)]
    assert fill(builder, messages) == [2, 1]


def test_built_batch_matches_the_schema_and_counts_every_byte():
    builder = RecordBatchBuilder(TOPIC, 3, max_rows=10, max_bytes=10_000)
    builder.add(message(5, 100))
    assert builder.nbytes == 100 + len("k") + len("i") + len("5")
    batch = builder.build()
    assert batch.schema == arrow_schema()
    assert batch.column("value").to_pylist() == [bytes([5]) * 100]
    assert batch.column("offset").to_pylist() == [5]
    assert batch.column("partition").to_pylist() == [3]


def test_bytes_per_batch_option():
    base = {"topic": "t"}
    assert ReadOptions.parse(base, streaming=False).bytes_per_batch == DEFAULT_BYTES_PER_BATCH == 16 << 20
    assert ReadOptions.parse({**base, "bytesPerBatch": "1000"}, streaming=False).bytes_per_batch == 1000


@pytest.mark.parametrize("partition", [-1, 0, 7, 300])
@pytest.mark.parametrize("batch_size", [0, 1, 5000])
def test_message_ids_are_the_clients_serialized_bytes(partition, batch_size):
    builder = RecordBatchBuilder(TOPIC, partition)
    ids = [
        MessageId(partition, ledger, entry, index, batch_size)
        for ledger, entry in ((1, 2), (1, 3), (2**40, 2**33))
        for index in (0, 1, 127, 128, 4095, 4096, 70_000)
    ]
    ids += [
        MessageId(partition, 9, 9),
        ChunkMessageId([MessageId(partition, 9, 1), MessageId(partition, 9, 4)]),
    ]
    for i, msg_id in enumerate(ids):
        builder.add(Message(b"v", msg_id, topic=TOPIC, index=i))
    assert builder.build().column("message_id").to_pylist() == [i.serialize() for i in ids]


def test_timestamps_are_microseconds_and_zero_is_null():
    builder = RecordBatchBuilder(TOPIC, -1)
    msg_id = MessageId(-1, 1, 1)
    builder.add(Message(b"a", msg_id, topic=TOPIC, publish_time=1_700_000_000_123, event_time=0, index=0))
    builder.add(Message(b"b", msg_id, topic=TOPIC, event_time=5, broker_publish_time=7, index=1))
    batch = builder.build()
    micros = {name: batch.column(name).cast(pa.int64()).to_pylist() for name in batch.schema.names[6:9]}
    assert micros == {
        "publish_time": [1_700_000_000_123_000, None],
        "event_time": [None, 5000],
        "broker_publish_time": [None, 7000],
    }


def columns(first: int, count: int, size: int = 10) -> MessageColumns:
    """``count`` messages of one batch entry, indexes from ``first``, as a ColumnReader gives them."""
    return MessageColumns(
        TOPIC,
        -1,
        payloads=[bytes([i % 256]) * size for i in range(first, first + count)],
        keys=[None] * count,
        properties=[{}] * count,
        publish_times=[1] * count,
        event_times=[0] * count,
        broker_publish_times=[None] * count,
        indexes=list(range(first, first + count)),
        ledger_ids=[1] * count,
        entry_ids=[first] * count,
        batch_indexes=list(range(count)),
        batch_sizes=[count] * count,
        chunk_ids=[None] * count,
    )


def test_rows_past_max_rows_wait_for_the_next_batch():
    builder = RecordBatchBuilder(TOPIC, -1, max_rows=4, max_bytes=1 << 20)
    builder.add_columns(columns(0, 10))  # one entry of 10 messages: more than a batch
    assert builder.full
    offsets = []
    while len(builder):
        offsets.append(builder.build().column("offset").to_pylist())
    assert offsets == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert builder.nbytes == 0


def test_columns_and_messages_make_the_same_batch():
    cols = columns(5, 3)
    by_columns = RecordBatchBuilder(TOPIC, -1)
    by_columns.add_columns(cols)
    by_messages = RecordBatchBuilder(TOPIC, -1)
    for i in range(len(cols)):
        by_messages.add(
            Message(cols.payloads[i], cols.message_id(i), topic=TOPIC, publish_time=1, index=cols.indexes[i])
        )
    assert by_columns.nbytes == by_messages.nbytes == 30
    assert by_columns.build().equals(by_messages.build())


@pytest.mark.parametrize("values", [[], [b""], [b"a", b"", b"bc" * 1000, bytes(range(256))]])
def test_binary_array_is_pa_array(values):
    made = binary_array(values)
    made.validate(full=True)
    assert made.equals(pa.array(values, type=pa.binary()))
