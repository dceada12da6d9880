"""Messages and bytes through a topic, producer or consumer (Pulsar's msgInCounter and kin), and
their rates over the last stats interval (Pulsar's msgRateIn, msgThroughputIn and kin).

The counters are plain ints bumped once per send and once per dispatch round. The rates are
worked out from them every ``stats_update_frequency_seconds`` by the broker's stats task, as
Pulsar does every ``statsUpdateFrequencyInSecs``, so the send path pays for no clock or window.
"""

from __future__ import annotations

import time


class Traffic:
    __slots__ = (
        "_at",
        "_seen",
        "bytes_in",
        "bytes_out",
        "drop_rate",
        "messages_dropped",
        "messages_in",
        "messages_out",
        "rate_in",
        "rate_out",
        "throughput_in",
        "throughput_out",
    )

    def __init__(self, now: float | None = None) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.messages_out = 0
        self.bytes_out = 0
        #: Messages a non-persistent subscription had no consumer with permits for (Pulsar's
        #: msgDropRate is their rate).
        self.messages_dropped = 0
        #: Messages and bytes per second over the last interval; zero until the first one ends.
        self.rate_in = 0.0
        self.throughput_in = 0.0
        self.rate_out = 0.0
        self.throughput_out = 0.0
        self.drop_rate = 0.0
        self._at = time.monotonic() if now is None else now
        self._seen = (0, 0, 0, 0, 0)

    def update_rates(self, now: float) -> None:
        """Rates over the time since the last update (or since creation); ``now`` is monotonic."""
        counts = (self.messages_in, self.bytes_in, self.messages_out, self.bytes_out, self.messages_dropped)
        elapsed = now - self._at
        if elapsed <= 0:
            return
        m_in, b_in, m_out, b_out, dropped = (
            now_count - seen for now_count, seen in zip(counts, self._seen, strict=True)
        )
        self.rate_in = m_in / elapsed
        self.throughput_in = b_in / elapsed
        self.rate_out = m_out / elapsed
        self.throughput_out = b_out / elapsed
        self.drop_rate = dropped / elapsed
        self._at = now
        self._seen = counts

    @property
    def average_message_size_in(self) -> float:
        """Bytes per message received over the last interval (Pulsar's averageMsgSize)."""
        return self.throughput_in / self.rate_in if self.rate_in else 0.0
