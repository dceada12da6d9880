"""The driver's view of the broker while planning: topic partitions and their indexes.

One ``BrokerView`` per batch or stream reader, created lazily (the readers are pickled, the
view is not). It keeps one client and, per partition, one reader parked at the end of the
topic to ask for the last message id cheaply on every trigger. Every broker call is retried
across a broker restart (the options' ``RetryPolicy``; the admin calls through ``ConnectorCalls``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from magnetar.client import Client, MessageId
from magnetar.spark import probes
from magnetar.spark.admin import connect_admin
from magnetar.spark.offsets import EARLIEST, LATEST
from magnetar.spark.options import ReadOptions

log = logging.getLogger(__name__)


class BrokerView:
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.retry = options.retry
        self.admin = connect_admin(options.admin_url, options.security, self.retry)
        self._client: Client | None = None
        self._tail_readers: dict[str, object] = {}

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = self.options.security.client(self.options.service_url)
        return self._client

    def partitions(self) -> list[str]:
        return probes.resolve_partitions(self.admin, self.options.selection)

    # -- indexes ---------------------------------------------------------------------------------
    def latest(self, topic: str) -> int | None:
        """Index the next message of ``topic`` will get; None when no message is retained."""
        last_id = self.retry.call(
            lambda: self._tail_reader(topic).get_last_message_id(), f"last message id of {topic}"
        )
        return probes.next_index(self.admin, topic, last_id)

    def _tail_reader(self, topic: str):  # -> magnetar.client Reader; it reconnects by itself
        reader = self._tail_readers.get(topic)
        if reader is None:
            reader = self.client.create_reader(topic, MessageId.latest, receiver_queue_size=1)
            self._tail_readers[topic] = reader
        return reader

    def earliest(self, topic: str) -> int | None:
        return self.retry.call(
            lambda: probes.first_index(self.client, self.admin, topic, self.options.read_compacted),
            f"first index of {topic}",
        )

    def at_time(self, topic: str, timestamp_ms: int) -> int | None:
        return self.retry.call(
            lambda: probes.index_at_time(self.client, self.admin, topic, timestamp_ms),
            f"index of {topic} at {timestamp_ms}",
        )

    def latest_all(self, topics: Iterable[str]) -> dict[str, int]:
        """Latest offsets; a partition with nothing retained says EARLIEST (read it from its first)."""
        return {tp: _or_earliest(self.latest(tp)) for tp in topics}

    def starting_offsets(self, topics: list[str]) -> dict[str, int]:
        """Concrete start offsets (EARLIEST where unknown). As Kafka's source: startingTimestamp
        wins over startingOffsetsByTimestamp, which wins over startingOffsets; a partition left
        out of startingOffsetsByTimestamp starts as startingOffsets says."""
        opts = self.options
        placed = by_time(topics, opts.starting_timestamp, opts.starting_by_timestamp)
        spec = opts.starting
        rest = [tp for tp in topics if tp not in placed]
        if isinstance(spec, dict):
            offsets = {tp: self.resolve(tp, spec.get(tp, EARLIEST)) for tp in rest}
        else:
            offsets = {tp: self.resolve(tp, EARLIEST if spec == "earliest" else LATEST) for tp in rest}
        offsets.update({tp: _or_earliest(self.at_time(tp, ts)) for tp, ts in placed.items()})
        return {tp: offsets[tp] for tp in topics}

    def ending_offsets(self, topics: list[str]) -> dict[str, int]:
        """Exclusive end offsets of a batch read: endingTimestamp, then endingOffsetsByTimestamp
        (the first message at or after the time is not read), then endingOffsets."""
        opts = self.options
        placed = by_time(topics, opts.ending_timestamp, opts.ending_by_timestamp)
        spec = opts.ending
        rest = [tp for tp in topics if tp not in placed]
        if isinstance(spec, dict):
            offsets = {tp: self.resolve(tp, spec.get(tp, LATEST)) for tp in rest}
        else:
            offsets = self.latest_all(rest)
        offsets.update({tp: _or_earliest(self.at_time(tp, ts)) for tp, ts in placed.items()})
        return {tp: offsets[tp] for tp in topics}

    def resolve(self, topic: str, offset: int) -> int:
        """An offset with EARLIEST / LATEST replaced by the index it means now, where known."""
        if offset == LATEST:
            return _or_earliest(self.latest(topic))
        if offset == EARLIEST:
            return _or_earliest(self.earliest(topic))
        return offset

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # closing is best effort: the broker may be gone
                log.debug("closing the planning client failed", exc_info=True)
            self._client = None
            self._tail_readers.clear()


def by_time(
    topics: list[str], everywhere: int | None, per_partition: dict[str, int] | None
) -> dict[str, int]:
    """The timestamp each partition is placed by: one for all, else those the JSON names."""
    if everywhere is not None:
        return dict.fromkeys(topics, everywhere)
    return {tp: per_partition[tp] for tp in topics if per_partition and tp in per_partition}


def _or_earliest(index: int | None) -> int:
    return EARLIEST if index is None else index
