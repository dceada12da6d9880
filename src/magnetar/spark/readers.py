"""The batch reader and the stream reader: planning on the driver, ``read_range`` in tasks."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from magnetar.spark.broker_view import BrokerView
from magnetar.spark.errors import OffsetOutOfRangeError
from magnetar.spark.offsets import EARLIEST, IndexRange, rate_limit, split
from magnetar.spark.options import ReadOptions
from magnetar.spark.range_read import ReadTask, read_range
from magnetar.spark.subscription import CommitSubscription, default_subscription_name
from magnetar.spark.trigger import TriggerGate, new_offsets

log = logging.getLogger(__name__)


def plan(view: BrokerView, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
    """InputPartitions for ``[start, end)`` of every partition in ``end``; a start still EARLIEST
    is resolved to the partition's first retained message now."""
    opts = view.options
    ranges = []
    for topic, stop in sorted(end.items()):
        begin = start.get(topic, EARLIEST)
        if begin < 0 and stop >= 0:
            begin = view.resolve(topic, EARLIEST)
        if begin < 0 or stop < 0:
            continue
        if begin > stop:
            _check_order(opts, topic, begin, stop)
            continue
        ranges.append(IndexRange(topic, begin, stop))
    # A compacted read's index range says nothing of how many rows it holds (one per key), and
    # each piece would read the compacted view again: one task per partition.
    if opts.read_compacted:
        pieces = [r for r in ranges if r.size > 0]
    else:
        pieces = split(ranges, opts.max_records_per_partition, opts.min_partitions)
    return [InputPartition(_task(opts, r)) for r in pieces]


def _read(partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
    """``read_range`` of the partition's task; Spark hands in None when planning found nothing."""
    task = getattr(partition, "value", None)
    return iter(()) if task is None else read_range(task)


def _check_order(opts: ReadOptions, topic: str, begin: int, stop: int) -> None:
    what = f"start index {begin} of {topic} is past its end index {stop}"
    if opts.fail_on_data_loss:
        raise OffsetOutOfRangeError(f"{what} (set failOnDataLoss=false to skip it with a warning)")
    log.warning("%s; skipping it (failOnDataLoss=false)", what)


def _task(opts: ReadOptions, r: IndexRange) -> ReadTask:
    return ReadTask(
        topic=r.topic,
        start=r.start,
        end=r.end,
        service_url=opts.service_url,
        admin_url=opts.admin_url,
        fail_on_data_loss=opts.fail_on_data_loss,
        read_timeout_ms=opts.read_timeout_ms,
        records_per_batch=opts.records_per_batch,
        retry_timeout_ms=opts.retry_timeout_ms,
        bytes_per_batch=opts.bytes_per_batch,
        security=opts.security,
        read_compacted=opts.read_compacted,
    )


class MagnetarBatchReader(DataSourceReader):
    """startingOffsets (default earliest) or startingTimestamp to endingOffsets (default latest)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        view = BrokerView(self.options)
        try:
            topics = view.partitions()
            return plan(view, view.starting_offsets(topics), view.ending_offsets(topics))
        finally:
            view.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class MagnetarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{topic partition: next index}``; commits move a durable subscription."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.subscription_name = options.subscription_name or default_subscription_name(options)
        self._view: BrokerView | None = None
        self._subscription: CommitSubscription | None = None
        self._target: dict[str, int] | None = None
        self._latest: dict[str, int] | None = None
        self._gate: TriggerGate | None = None
        if options.min_offsets_per_trigger:
            self._gate = TriggerGate(options.min_offsets_per_trigger, options.max_trigger_delay_ms)

    def __getstate__(self) -> dict:  # tasks get the options, never the driver's connections
        return {**self.__dict__, "_view": None, "_subscription": None}

    @property
    def view(self) -> BrokerView:
        if self._view is None:
            self._view = BrokerView(self.options)
        return self._view

    @property
    def subscription(self) -> CommitSubscription:
        if self._subscription is None:
            self._subscription = CommitSubscription(
                self.view.client, self.view.admin, self.options.retry, self.subscription_name
            )
        return self._subscription

    def initialOffset(self) -> dict[str, int]:
        topics = self.view.partitions()
        for topic in topics:  # before resolving: from now on retention keeps what the query will read
            self.subscription.hold(topic)
        start = self.view.starting_offsets(topics)
        for topic, index in start.items():
            self.subscription.advance(topic, index)
        return start

    def getDefaultReadLimit(self) -> ReadLimit:
        """ReadMaxRows, else ReadMinRows, else all. PySpark 4.3 has no composite limit, so with
        both options set the minimum (and maxTriggerDelay) is applied from the options."""
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.view.latest_all(self.view.partitions())

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        topics = self.view.partitions()
        for topic in topics:
            if topic not in start:
                self.subscription.hold(topic)  # a new partition is read from its first message
        begin = {topic: start.get(topic, EARLIEST) for topic in sorted({*start, *topics})}
        latest = self.view.latest_all(topics)
        self._latest = dict(latest)
        if self._target is not None:  # AvailableNow: nothing past what was there when the query started
            latest = {t: _capped(i, self._target.get(t, -1)) for t, i in latest.items()}
        end = {t: latest[t] if latest.get(t, -1) > at else at for t, at in begin.items()}
        if not self._admitted(begin, end, limit):
            return dict(start)  # the same offset: Spark plans no batch this trigger
        if isinstance(limit, ReadMaxRows):
            end.update(self._limited(begin, end, limit.max_rows))
        return end

    def _admitted(self, begin: dict[str, int], end: dict[str, int], limit: ReadLimit) -> bool:
        """minOffsetsPerTrigger / maxTriggerDelay; not under AvailableNow (it could wait for
        data that never comes) nor where Spark asks for all available."""
        if self._gate is None or self._target is not None or isinstance(limit, ReadAllAvailable):
            return True
        return self._gate.admit(new_offsets(self._resolved(begin, end), end))

    def _resolved(self, begin: dict[str, int], end: dict[str, int]) -> dict[str, int]:
        """Starts with EARLIEST replaced by the first retained index where the end is known."""
        return {t: self.view.resolve(t, EARLIEST) if at < 0 <= end[t] else at for t, at in begin.items()}

    def _limited(self, begin: dict[str, int], end: dict[str, int], max_rows: int) -> dict[str, int]:
        resolved = self._resolved(begin, end)
        movable = [t for t in begin if 0 <= resolved[t] <= end[t]]
        return rate_limit({t: resolved[t] for t in movable}, {t: end[t] for t in movable}, max_rows)

    def reportLatestOffset(self) -> dict[str, int] | None:
        return self._latest

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return plan(self.view, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: dict[str, int]) -> None:
        for topic, index in end.items():
            try:
                self.subscription.advance(topic, index)
            except Exception as exc:  # the subscription lags, which only keeps data longer
                log.warning(
                    "subscription %s on %s not moved to %d: %s", self.subscription_name, topic, index, exc
                )

    def stop(self) -> None:
        if self._subscription is not None:
            self._subscription.close()
        if self._view is not None:
            self._view.close()


def _capped(latest: int, target: int) -> int:
    """``latest`` no further than ``target``; nothing (-1) where there was nothing at the target."""
    return min(latest, target) if target >= 0 else -1
