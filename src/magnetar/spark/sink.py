"""The sink: rows to messages, exactly once through broker deduplication.

Each Spark task writes its rows with one producer per target topic partition, named
``<prefix>-<task partition id>`` (prefix: ``producerNamePrefix``, else ``spark-<query id>``
for a stream, ``spark-batch-<uuid>`` for a batch write). The i-th row the task routes to a
topic partition in micro-batch b gets the sequence id ``b << 32 | i``. The broker stores a
message only if its sequence id is above the highest it has stored for that producer name,
so a replayed micro-batch (same rows, same order, same ids) writes nothing twice, and the
producer skips what the broker already has before sending.

Deduplication must be on for the target namespace (``enableDeduplication=true`` lets the sink
turn it on); otherwise the sink refuses to start.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, LongType, MapType, StringType, StructType, TimestampType

from magnetar.client.admin import AdminClient
from magnetar.client.errors import ProducerBusy
from magnetar.protocol.key_hash import key_partition
from magnetar.protocol.topic_name import TopicName, partition_name
from magnetar.spark.admin import connect_admin
from magnetar.spark.errors import DeduplicationDisabledError, InvalidOptionError, MagnetarSparkError
from magnetar.spark.options import WriteOptions, full_name
from magnetar.spark.retry import RetryPolicy

log = logging.getLogger(__name__)

ROW_BITS = 32
SEND_CHUNK = 500
R = TypeVar("R")
MAX_ROWS_PER_BATCH = 1 << ROW_BITS
#: How long a task waits for an earlier attempt of itself to let go of its producer name.
PRODUCER_BUSY_RETRY = RetryPolicy(timeout_s=30.0, first_wait_s=0.25, longest_wait_s=2.0)
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def sequence_id(batch_id: int, row: int) -> int:
    if row >= MAX_ROWS_PER_BATCH:
        raise MagnetarSparkError(f"more than {MAX_ROWS_PER_BATCH} rows for one topic partition in one task")
    return (batch_id << ROW_BITS) | row


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    partition_id: int
    written: int
    skipped: int  # already stored by an earlier attempt of this batch


@dataclass(frozen=True)
class OutRow:
    topic: str
    key: str | None
    value: bytes
    properties: tuple[tuple[str, str], ...]
    event_time_ms: int | None

    def sort_key(self) -> tuple:
        return (self.topic, self.key or "", self.event_time_ms or 0, self.value, self.properties)


# -- input columns -----------------------------------------------------------------------------------


def check_input_schema(schema: StructType, options: WriteOptions) -> None:
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    value = fields.get("value")
    if not isinstance(value, BinaryType | StringType):
        raise InvalidOptionError(
            f"the sink needs a column value (binary or string); the input is {schema.simpleString()}"
        )
    allowed = {
        "key": (StringType, BinaryType),
        "topic": (StringType,),
        "properties": (MapType,),
        "event_time": (TimestampType, LongType),
    }
    for name, types in allowed.items():
        if name in fields and not isinstance(fields[name], types):
            raise InvalidOptionError(f"column {name} must be {' or '.join(t.__name__ for t in types)}")
    if "topic" not in fields and options.topic is None:
        raise InvalidOptionError("the sink needs the option topic or a column topic")


def rows_of(batches: Iterable[pa.RecordBatch], default_topic: str | None) -> Iterator[OutRow]:
    for batch in batches:
        topics, keys, values, props, times = (
            _column(batch, name) for name in ("topic", "key", "value", "properties", "event_time")
        )
        for topic, key, value, prop, when in zip(topics, keys, values, props, times, strict=True):
            name = topic or default_topic
            if not name:
                raise MagnetarSparkError("a row has no topic (null topic column and no topic option)")
            yield OutRow(
                topic=full_name(name) if topic else name,
                key=key.decode() if isinstance(key, bytes) else key,
                value=b"" if value is None else value.encode() if isinstance(value, str) else value,
                properties=tuple(sorted((k, v) for k, v in (prop or []) if v is not None)),
                event_time_ms=when,
            )


def _column(batch: pa.RecordBatch, name: str) -> list:
    """A column as Python values (timestamps as epoch milliseconds); all None when absent."""
    names = [n.lower() for n in batch.schema.names]
    if name not in names:
        return [None] * batch.num_rows
    col = batch.column(names.index(name))
    if pa.types.is_timestamp(col.type):
        col = pc.divide(pc.cast(col.cast(pa.timestamp("us")), pa.int64()), 1000)
    return col.to_pylist()


# -- deduplication -----------------------------------------------------------------------------------


def ensure_deduplication(admin: AdminClient, namespace: str, enable: bool) -> None:
    if admin.deduplication(namespace) is True:
        return
    if enable:
        admin.set_deduplication(namespace, True)
        log.info("enabled deduplication on namespace %s for exactly-once output", namespace)
        return
    raise DeduplicationDisabledError(
        f"deduplication is not enabled on namespace {namespace}: the sink's exactly-once output needs it. "
        f"Enable it (POST true to {admin.http_url}/admin/v2/namespaces/{namespace}/deduplication) "
        "or set the sink option enableDeduplication=true to let the sink enable it."
    )


# -- one task's writes -------------------------------------------------------------------------------


class TaskWriter:
    """The producers of one task, one per target topic partition, and their sequence ids.

    Routing and sequence ids are decided here; the sends themselves run on the client's event
    loop, ``SEND_CHUNK`` at a time, so a message costs no thread hop.
    """

    def __init__(self, options: WriteOptions, producer_name: str, batch_id: int) -> None:
        self.options = options
        self.producer_name = producer_name
        self.batch_id = batch_id
        self.admin = connect_admin(options.admin_url, options.security, options.retry)
        self.client = options.security.client(options.service_url)
        self._partitions: dict[str, int] = {}
        self._checked: set[str] = set()
        self._producers: dict[str, tuple[Any, int]] = {}
        self._rows: dict[str, int] = {}
        self._routed: dict[str, int] = {}
        self._pending: list[tuple[Any, int, OutRow]] = []
        self._errors: list[BaseException] = []
        self.written = 0  # counted on the loop thread
        self.duplicates = 0  # counted on the loop thread: sent again, dropped by the broker
        self.not_sent = 0  # counted here: the broker had them before this attempt began

    def _on_loop(self, coro: Coroutine[Any, Any, R]) -> R:
        return asyncio.run_coroutine_threadsafe(coro, self.client.loop).result()

    def write(self, row: OutRow) -> None:
        target = self._route(row)
        producer, last = self._producer(target)
        n = self._rows.get(target, 0)
        self._rows[target] = n + 1
        seq = sequence_id(self.batch_id, n)
        if seq <= last:
            self.not_sent += 1  # stored by an earlier attempt
            return
        self._pending.append((producer, seq, row))
        if len(self._pending) >= SEND_CHUNK:
            self._send_pending()

    def _send_pending(self) -> None:
        pending, self._pending = self._pending, []
        if pending:
            self._on_loop(self._send_all(pending))

    async def _send_all(self, pending: list[tuple[Any, int, OutRow]]) -> None:
        for producer, seq, row in pending:
            await producer.send_async(
                row.value,
                self._on_receipt,
                properties=dict(row.properties) or None,
                partition_key=row.key,
                event_timestamp=row.event_time_ms or None,
                sequence_id=seq,
            )

    def _on_receipt(self, error: BaseException | None, msg_id) -> None:  # on the loop thread
        if error is not None:
            self._errors.append(error)
        elif msg_id is not None and msg_id.ledger_id() < 0:
            self.duplicates += 1
        else:
            self.written += 1

    def _route(self, row: OutRow) -> str:
        count = self._partitions.get(row.topic)
        if count is None:
            namespace = TopicName.parse(row.topic).namespace_name
            if namespace not in self._checked:
                ensure_deduplication(self.admin, namespace, self.options.enable_deduplication)
                self._checked.add(namespace)
            count = self._partitions[row.topic] = self.admin.partition_count(row.topic)
        if count == 0:
            return row.topic
        if row.key:
            # by key hash (an empty key is none), as magnetar.client and the official client route
            return partition_name(row.topic, key_partition(row.key, count))
        n = self._routed.get(row.topic, 0)
        self._routed[row.topic] = n + 1
        return partition_name(row.topic, n % count)

    def _producer(self, topic: str) -> tuple[Any, int]:
        if topic not in self._producers:

            def create() -> Any:
                return self._on_loop(
                    self.client.aio.create_producer(
                        topic,
                        producer_name=self.producer_name,
                        batching_enabled=False,  # batch boundaries differ between attempts
                        chunking_enabled=self.options.chunking_enabled,
                        block_if_queue_full=True,
                        send_timeout_millis=self.options.send_timeout_ms,
                    )
                )

            what = f"producer on {topic}"
            producer = PRODUCER_BUSY_RETRY.call(  # an earlier attempt of this task still holds the name
                lambda: self.options.retry.call(create, what),  # across a broker restart
                what,
                transient=lambda exc: isinstance(exc, ProducerBusy),
            )
            self._producers[topic] = (producer, producer.last_sequence_id())
        return self._producers[topic]

    def finish(self) -> None:
        try:
            self._send_pending()
            for producer, _ in self._producers.values():
                self._on_loop(producer.flush())
            if self._errors:
                raise MagnetarSparkError(f"{len(self._errors)} sends failed, first: {self._errors[0]!r}")
        finally:
            self.close()

    def close(self) -> None:
        try:
            for producer, _ in self._producers.values():
                self._on_loop(producer.close())
        finally:
            self.client.close()


def write_task(options: WriteOptions, prefix: str, batch_id: int, batches: Iterator[pa.RecordBatch]):
    context = TaskContext.get()
    partition_id = context.partitionId() if context else 0
    rows: Iterable[OutRow] = rows_of(batches, options.topic)
    if options.sort_before_write:
        rows = sorted(rows, key=OutRow.sort_key)
    writer = TaskWriter(options, f"{prefix}-{partition_id}", batch_id)
    try:
        for row in rows:
            writer.write(row)
    except BaseException:
        writer.close()
        raise
    writer.finish()
    return SinkCommitMessage(partition_id, writer.written, writer.not_sent + writer.duplicates)


# -- the Spark writers -------------------------------------------------------------------------------


class _SinkSetup:
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_input_schema(schema, options)
        self.options = options
        if options.topic is not None:
            admin = connect_admin(options.admin_url, options.security, options.retry)
            ensure_deduplication(
                admin, TopicName.parse(options.topic).namespace_name, options.enable_deduplication
            )


class MagnetarBatchWriter(_SinkSetup, DataSourceArrowWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self.prefix = options.producer_name_prefix or f"spark-batch-{uuid.uuid4().hex[:12]}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(self.options, self.prefix, 0, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_totals("batch write", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_totals("aborted batch write (what was stored stays)", messages)


class MagnetarStreamWriter(_SinkSetup, DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        context = TaskContext.get()
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        if batch_id is None or (query_id is None and self.options.producer_name_prefix is None):
            raise MagnetarSparkError("the stream sink runs without Spark's micro-batch id or query id")
        prefix = self.options.producer_name_prefix or f"spark-{query_id}"
        return write_task(self.options, prefix, int(batch_id), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_totals(f"micro-batch {batchId}", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_totals(f"aborted micro-batch {batchId} (what was stored stays; a replay skips it)", messages)


def _log_totals(what: str, messages: list[WriterCommitMessage | None]) -> None:
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    log.info(
        "%s: %d messages written, %d already stored, by %d tasks",
        what,
        sum(m.written for m in done),
        sum(m.skipped for m in done),
        len(done),
    )
