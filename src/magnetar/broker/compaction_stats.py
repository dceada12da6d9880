"""What a topic's compactions did (Pulsar's ``CompactionRecord``): the last run, for the topic
stats' ``compaction`` section, and totals since the topic was loaded, for the
``pulsar_compaction_*`` metrics.

The compactor's thread adds the bytes it reads and writes; the stats task works out their rates
over each stats interval (``update_rates``), as for a topic's traffic (``traffic.py``).
"""

from __future__ import annotations

import time
from typing import Any


class CompactionRecord:
    __slots__ = (
        "_at",
        "_seen",
        "_started",
        "bytes_read",
        "bytes_written",
        "duration_ms",
        "failed_count",
        "last_duration_ms",
        "last_failed_timestamp_ms",
        "last_removed_event_count",
        "last_succeed_timestamp_ms",
        "read_throughput",
        "removed_event_count",
        "succeed_count",
        "write_throughput",
    )

    def __init__(self, now: float | None = None) -> None:
        #: The last run's messages compacted away, when it ended (ms since the epoch, 0: never)
        #: and how long it took, as Pulsar's stats name them.
        self.last_removed_event_count = 0
        self.last_succeed_timestamp_ms = 0
        self.last_failed_timestamp_ms = 0
        self.last_duration_ms = 0
        #: Totals since the topic was loaded.
        self.removed_event_count = 0
        self.succeed_count = 0
        self.failed_count = 0
        self.duration_ms = 0
        #: Bytes the compactor read (both phases) and wrote to compacted ledgers.
        self.bytes_read = 0
        self.bytes_written = 0
        #: Bytes per second of those over the last stats interval.
        self.read_throughput = 0.0
        self.write_throughput = 0.0
        self._started = 0.0
        self._at = time.monotonic() if now is None else now
        self._seen = (0, 0)

    def started(self) -> None:
        self._started = time.monotonic()

    def succeeded(self, removed: int) -> None:
        self._ended(True)
        self.last_removed_event_count = removed
        self.removed_event_count += removed

    def failed(self) -> None:
        self._ended(False)

    def _ended(self, success: bool) -> None:
        duration = int((time.monotonic() - self._started) * 1000)
        self.last_duration_ms = duration
        self.duration_ms += duration
        now_ms = int(time.time() * 1000)
        if success:
            self.last_succeed_timestamp_ms = now_ms
            self.succeed_count += 1
        else:
            self.last_failed_timestamp_ms = now_ms
            self.failed_count += 1

    @property
    def ran(self) -> bool:
        """Whether a compaction ended since the topic was loaded."""
        return bool(self.succeed_count or self.failed_count)

    def update_rates(self, now: float) -> None:
        """Read and write throughput over the time since the last update; ``now`` is monotonic."""
        elapsed = now - self._at
        if elapsed <= 0:
            return
        counts = (self.bytes_read, self.bytes_written)
        self.read_throughput = (counts[0] - self._seen[0]) / elapsed
        self.write_throughput = (counts[1] - self._seen[1]) / elapsed
        self._at = now
        self._seen = counts

    def to_json(self) -> dict[str, Any]:
        """Pulsar's ``CompactionStats`` (the topic stats' ``compaction`` section)."""
        return {
            "lastCompactionRemovedEventCount": self.last_removed_event_count,
            "lastCompactionSucceedTimestamp": self.last_succeed_timestamp_ms,
            "lastCompactionFailedTimestamp": self.last_failed_timestamp_ms,
            "lastCompactionDurationTimeInMills": self.last_duration_ms,
        }
