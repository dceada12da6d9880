"""Reading one index range ``[start, end)`` of one topic partition: the work of a Spark task.

Runs on executors, in a process that knows nothing but the ``ReadTask`` it was handed. The
rows are a function of the range alone, so a replayed micro-batch yields exactly the same rows:

- a plain or batched message belongs to the range that holds its index;
- a chunked message (several entries, one index each) belongs to the range holding its
  *first* chunk: a range started inside a chunked message drops that message (the range
  before it delivered it), and a range that ends inside one reads on until it is complete.

The reader starts at the message id of ``start`` (looked up over HTTP) and stops once it has
passed the entry of ``end - 1`` with no chunked message begun before ``end`` still incomplete.

With ``read_compacted`` (``pulsar.reader.readCompacted``) the reader reads the partition's
compacted view (compaction.md): the latest message of each key up to the compaction horizon, then
the topic. The entry of ``end - 1`` may have been compacted out, so the scan also ends when the
reader has nothing more to read (``has_message_available``: for a compacted reader the broker
names the view's last kept message while the view covers the topic); a ``start`` in ledgers
retention deleted is read from the view's start (the view keeps what those ledgers held).

A broker restart does not fail the task: look-ups and the reader's creation are retried
(``RetryPolicy``, option ``retryTimeoutMs``), and while the reader is disconnected (it
reconnects by itself, from the last message it handed out) the wait counts against
``retryTimeoutMs``, not ``readTimeoutMs``.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

import pyarrow as pa

from magnetar.client import Client, MessageColumns, MessageId, Timeout
from magnetar.client.admin import AdminClient
from magnetar.protocol.topic_name import split_partition
from magnetar.spark import probes
from magnetar.spark.admin import connect_admin
from magnetar.spark.errors import IndexNotEnabledError, OffsetOutOfRangeError, ReadStalledError
from magnetar.spark.retry import DEFAULT_RETRY_TIMEOUT_MS, RetryPolicy
from magnetar.spark.schema import DEFAULT_BYTES_PER_BATCH, RecordBatchBuilder
from magnetar.spark.security import ConnectionSecurity

if TYPE_CHECKING:
    from magnetar.client.column_reader import ColumnReader

log = logging.getLogger(__name__)

POLL_MS = 200
R = TypeVar("R")


@dataclass(frozen=True)
class ReadTask:
    """Everything a task needs: it travels pickled inside the InputPartition."""

    topic: str  # the partition's full name
    start: int
    end: int
    service_url: str
    admin_url: str
    fail_on_data_loss: bool = True
    read_timeout_ms: int = 30_000
    records_per_batch: int = 10_000
    retry_timeout_ms: int = DEFAULT_RETRY_TIMEOUT_MS
    bytes_per_batch: int = DEFAULT_BYTES_PER_BATCH
    security: ConnectionSecurity = field(default_factory=ConnectionSecurity)
    read_compacted: bool = False

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy.of_ms(self.retry_timeout_ms)


def read_range(task: ReadTask) -> Iterator[pa.RecordBatch]:
    if task.end <= task.start:
        return
    retry = task.retry
    admin = connect_admin(task.admin_url, task.security, retry)
    base, partition = split_partition(task.topic)
    client = task.security.client(task.service_url)
    try:
        bounds = _bounds(client, admin, task)
        if bounds is None:
            return
        start, start_id, last_id = bounds

        def on_loop(coro: Coroutine[Any, Any, R]) -> R:  # the scan runs on the client's event loop
            return asyncio.run_coroutine_threadsafe(coro, client.loop).result()

        reader = retry.call(
            lambda: on_loop(
                client.aio.create_column_reader(
                    task.topic,
                    start_id,
                    start_message_id_inclusive=True,
                    is_read_compacted=task.read_compacted,
                )
            ),
            f"reader of {task.topic}",
        )
        try:
            scan = RangeScan(reader, task, start, last_id)
            builder = RecordBatchBuilder(base, partition, task.records_per_batch, task.bytes_per_batch)
            yield from _ahead(lambda: scan.next_batch(builder), client.loop)
        finally:
            on_loop(reader.close())
    finally:
        client.close()


def _ahead(
    next_batch: Callable[[], Coroutine[Any, Any, pa.RecordBatch | None]], loop: asyncio.AbstractEventLoop
) -> Iterator[pa.RecordBatch]:
    """The batches ``next_batch()`` makes on ``loop`` until it answers None, one ahead: the next
    batch is read and built on the loop's thread while the caller hands this one to Spark, whose
    write to the JVM waits for the JVM to take it in (and lets go of the GIL meanwhile)."""
    pending = asyncio.run_coroutine_threadsafe(next_batch(), loop)
    try:
        while (batch := pending.result()) is not None:
            pending = asyncio.run_coroutine_threadsafe(next_batch(), loop)
            yield batch
    finally:
        pending.cancel()  # a batch nobody will take: its read stops before the reader is closed


def _bounds(
    client: Client, admin: AdminClient, task: ReadTask
) -> tuple[int, MessageId, MessageId | None] | None:
    """(start, id of start, id of end - 1), after the data-loss rules; None: nothing to read. A
    compacted read of indexes retention deleted starts at the view's start and may not know the
    id of ``end - 1`` (None)."""
    start = task.start
    start_id = probes.message_id_at(admin, task.topic, start)
    if start_id is None:
        first = task.retry.call(
            lambda: probes.first_index(client, admin, task.topic), f"first index of {task.topic}"
        )
        if first is not None and first <= start:
            _data_loss(task, f"index {start} of {task.topic} is not written yet")
            return None
        if task.read_compacted:  # deleted, but what the view kept of them is there
            last_id = probes.message_id_at(admin, task.topic, task.end - 1)
            if last_id is None and first is not None and first <= task.end - 1:
                _data_loss(task, f"index {task.end - 1} of {task.topic} is not written yet")
                return None
            return start, MessageId.earliest, last_id  # None: end - 1 was deleted too
        _data_loss(
            task,
            f"indexes {start}..{min(task.end, first if first is not None else task.end) - 1} of {task.topic} "
            f"are no longer retained (first retained: {first})",
        )
        if first is None or first >= task.end:
            return None
        start, start_id = first, probes.message_id_at(admin, task.topic, first)
        if start_id is None:
            return None
    last_id = probes.message_id_at(admin, task.topic, task.end - 1)
    if last_id is None:
        _data_loss(task, f"index {task.end - 1} of {task.topic} is no longer retained, or not written yet")
        return None
    return start, start_id, last_id


def _data_loss(task: ReadTask, what: str) -> None:
    if task.fail_on_data_loss:
        raise OffsetOutOfRangeError(
            f"{what}; reading [{task.start}, {task.end}) is impossible. Set failOnDataLoss=false to skip "
            "what is missing with a warning instead."
        )
    log.warning("%s; skipping it (failOnDataLoss=false)", what)


class RangeScan:
    """Drives an asyncio column reader over one range and decides, entry by entry, what belongs
    to it. Runs on the client's event loop, so taking messages costs no thread hop."""

    def __init__(self, reader: ColumnReader, task: ReadTask, start: int, last_id: MessageId | None) -> None:
        self.reader = reader
        self.task = task
        self.start = start
        #: None: a compacted read whose end was deleted by retention; a chunked message (kept whole
        #: by compaction) then counts at its last chunk's index, as the entry's place is unknown.
        self.last_key = None if last_id is None else probes.entry_key(last_id)
        self.watch = ChunkWatch(reader)
        self.reached = False
        self.finished = False
        self._idle_since = time.monotonic()
        self._away_since: float | None = None

    async def next_batch(self, builder: RecordBatchBuilder) -> pa.RecordBatch | None:
        """The range's next record batch: ``builder`` takes the range's next messages until it is
        full or the range is done (rows past ``max_rows`` wait in it for the next); None when
        nothing is left."""
        while not (self.finished or builder.full):
            if self._done():
                self.finished = True
                break
            rows, nbytes = builder.room
            cols = await self._next(rows, nbytes)
            if cols is not None:
                builder.add_columns(self._belonging(cols))
        return builder.build() if len(builder) else None

    async def _next(self, max_messages: int, max_bytes: int) -> MessageColumns | None:
        try:
            cols = await self.reader.receive_columns(max_messages, max_bytes, POLL_MS)
        except Timeout:
            if self._waiting_for_reconnect():
                return None
            if self.task.read_compacted and not await self.reader.has_message_available():
                self.finished = True  # the rest of the range was compacted out
                return None
            if time.monotonic() - self._idle_since > self.task.read_timeout_ms / 1000:
                raise ReadStalledError(
                    f"reading [{self.task.start}, {self.task.end}) of {self.task.topic}: no message for "
                    f"{self.task.read_timeout_ms} ms before the end of the range (readTimeoutMs)"
                ) from None
            return None
        self._idle_since = time.monotonic()
        return cols

    def _waiting_for_reconnect(self) -> bool:
        """Whether the reader is disconnected (the broker restarting) for less than retryTimeoutMs;
        the readTimeoutMs stall is then counted from the reconnection."""
        if self.reader.is_connected():
            self._away_since = None
            return False
        now = time.monotonic()
        if self._away_since is None:
            self._away_since = now
            log.warning("reading %s: the broker is away, waiting for a reconnection", self.task.topic)
        if now - self._away_since >= self.task.retry.timeout_s:
            return False  # given up: the stall rule decides
        self._idle_since = now
        return True

    def _belonging(self, cols: MessageColumns) -> MessageColumns:
        """The rows of ``cols`` that belong to the range (and whether its end is reached).

        Without chunked messages the indexes rise row by row, so the range is one slice found
        by bisection; a chunked message belongs where its first chunk is."""
        indexes = cols.indexes
        if not _all_indexed(indexes):
            raise IndexNotEnabledError(self.task.topic, "messages arrive without an index")
        start, end = self.start, self.task.end
        if not any(cols.chunk_ids) or self.last_key is None:
            if indexes[-1] >= end - 1:
                self.reached = True
            lo, hi = bisect.bisect_left(indexes, start), bisect.bisect_left(indexes, end)
            return cols if (lo, hi) == (0, len(cols)) else cols.slice(lo, hi)
        keep = []
        for i, (index, chunk) in enumerate(zip(indexes, cols.chunk_ids, strict=True)):
            if chunk is not None:
                if probes.entry_key(chunk) >= self.last_key:
                    self.reached = True
                if probes.entry_key(chunk.first_chunk_message_id()) <= self.last_key:
                    keep.append(i)
                continue
            if index >= end - 1:
                self.reached = True
            if start <= index < end:
                keep.append(i)
        return cols.take(keep)

    def _done(self) -> bool:
        if self.last_key is None:
            return self.reached
        if not self.reached:
            self.reached = self.watch.passed(self.last_key)
        return self.reached and not self.watch.pending_started_by(self.last_key)


class ChunkWatch:
    """What the reader's chunk assembler has seen, discarded chunks included
    (``Consumer.chunk_progress()``, read on the loop thread, where it changes).

    A range that starts inside a chunked message never gets that message, so the entry of
    ``end - 1`` may be a chunk that is silently dropped; the newest chunk taken in tells the
    scan it has been passed. The progress also tells whether a chunked message begun inside
    the range is still incomplete or not handed out yet.
    """

    def __init__(self, reader: ColumnReader) -> None:
        self._reader = reader

    def passed(self, last_key: tuple[int, int]) -> bool:
        """Whether a chunk at or after ``last_key`` was taken in and every message completed
        before it has been handed out (the receive queue is empty).

        The progress lists the queue's chunked ids, so it costs as much as the queue is long:
        asked for only once the queue is empty (it was 97% of a scan's time asked per message)."""
        if self._reader.queued_messages:
            return False
        progress = self._reader.chunk_progress()
        newest = progress.newest_chunk
        return newest is not None and probes.entry_key(newest) >= last_key and progress.queue_empty

    def pending_started_by(self, last_key: tuple[int, int]) -> bool:
        """Whether a message whose first chunk is at or before ``last_key`` is not handed out yet."""
        firsts = self._reader.chunk_progress().unfinished_first_chunks
        return any(probes.entry_key(first) <= last_key for first in firsts)


def _all_indexed(indexes: list[int | None]) -> TypeGuard[list[int]]:
    """Every row has its index (the broker's entry metadata is on)."""
    return None not in indexes
