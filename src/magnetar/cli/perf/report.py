"""The pure part of ``magnetar perf``: counting, latency histograms, and the lines printed.

Latencies are recorded in microseconds in an HdrHistogram (as pulsar-perf records them) and
printed in milliseconds. A ``Recorder`` keeps two views of the same events: the window since the
last report (printed every ``-i`` seconds, then started afresh) and the whole run (the summary).
Nothing here touches the network or the clock: the callers pass the times in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hdrh.histogram import HdrHistogram

#: Latencies above this (an hour, in microseconds) are recorded as this: a histogram has a range.
HIGHEST_MICROS = 3_600_000_000
#: Three significant digits: 0.1 % resolution, far below what a millisecond print shows.
SIGNIFICANT_DIGITS = 3

#: The percentiles printed, with their labels, in pulsar-perf's order.
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("med", 50.0),
    ("95pct", 95.0),
    ("99pct", 99.0),
    ("99.9pct", 99.9),
    ("99.99pct", 99.99),
)


def new_histogram() -> HdrHistogram:
    return HdrHistogram(1, HIGHEST_MICROS, SIGNIFICANT_DIGITS)


def record_latency(histogram: HdrHistogram, micros: float) -> None:
    """Record one latency, clamped into the histogram's range (a skewed clock can give < 0)."""
    histogram.record_value(int(min(max(micros, 0), HIGHEST_MICROS)))


@dataclass(frozen=True, slots=True)
class Latency:
    """A histogram's summary in milliseconds; all zeros for an empty one."""

    count: int
    mean: float
    percentiles: tuple[float, ...]
    max: float

    @classmethod
    def of(cls, histogram: HdrHistogram) -> Latency:
        count = histogram.get_total_count()
        if count == 0:
            return cls(0, 0.0, tuple(0.0 for _ in PERCENTILES), 0.0)
        return cls(
            count,
            histogram.get_mean_value() / 1000,
            tuple(histogram.get_value_at_percentile(p) / 1000 for _, p in PERCENTILES),
            histogram.get_max_value() / 1000,
        )

    def text(self) -> str:
        """``mean: 4.123 ms - med: 3.500 - 95pct: ... - Max: ...`` as pulsar-perf prints it."""
        parts = [f"mean: {self.mean:.3f} ms"]
        parts += [
            f"{label}: {value:.3f}" for (label, _), value in zip(PERCENTILES, self.percentiles, strict=True)
        ]
        parts.append(f"Max: {self.max:.3f}")
        return " - ".join(parts)


@dataclass(frozen=True, slots=True)
class Window:
    """What happened in a span of ``seconds``."""

    messages: int
    bytes: int
    failures: int
    seconds: float
    latency: Latency

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def failure_rate(self) -> float:
        return self.failures / self.seconds if self.seconds > 0 else 0.0

    @property
    def mbit(self) -> float:
        """Megabits a second, as pulsar-perf counts them (2**20 bits)."""
        return self.bytes * 8 / 1024 / 1024 / self.seconds if self.seconds > 0 else 0.0


@dataclass(slots=True)
class _Counts:
    messages: int = 0
    bytes: int = 0
    failures: int = 0
    histogram: HdrHistogram = field(default_factory=new_histogram)

    def window(self, seconds: float) -> Window:
        return Window(self.messages, self.bytes, self.failures, seconds, Latency.of(self.histogram))


class Recorder:
    """Counts messages, bytes, failures and latencies, for the current window and the whole run."""

    def __init__(self, started: float) -> None:
        self.started = started
        self._window_started = started
        self._window = _Counts()
        self._total = _Counts()

    def success(self, size: int, latency_micros: float) -> None:
        for counts in (self._window, self._total):
            counts.messages += 1
            counts.bytes += size
            record_latency(counts.histogram, latency_micros)

    def failure(self) -> None:
        self._window.failures += 1
        self._total.failures += 1

    @property
    def messages(self) -> int:
        """Messages counted so far in the whole run."""
        return self._total.messages

    def take_window(self, now: float) -> Window:
        """The window since the last call (or the start); a new one starts at ``now``."""
        window = self._window.window(now - self._window_started)
        self._window = _Counts()
        self._window_started = now
        return window

    def total(self, now: float) -> Window:
        return self._total.window(now - self.started)


def produced_line(window: Window) -> str:
    """The line ``perf produce`` prints every interval."""
    return (
        f"Throughput produced: {window.messages} msg --- {window.rate:.1f} msg/s --- "
        f"{window.mbit:.3f} Mbit/s --- failures {window.failures} --- Latency: {window.latency.text()}"
    )


def received_line(window: Window) -> str:
    """The line ``perf consume`` prints every interval (latency: publish time to receipt)."""
    return (
        f"Throughput received: {window.messages} msg --- {window.rate:.1f} msg/s --- "
        f"{window.mbit:.3f} Mbit/s --- Latency: {window.latency.text()}"
    )


def produced_summary(total: Window) -> list[str]:
    """The aggregated lines ``perf produce`` prints at the end."""
    return [
        f"Aggregated throughput stats --- {total.messages} records sent --- {total.rate:.1f} msg/s --- "
        f"{total.mbit:.3f} Mbit/s --- failures {total.failures} --- {total.seconds:.3f} s",
        f"Aggregated latency stats --- Latency: {total.latency.text()}",
    ]


def received_summary(total: Window) -> list[str]:
    """The aggregated lines ``perf consume`` prints at the end."""
    return [
        f"Aggregated throughput stats --- {total.messages} records received --- {total.rate:.1f} msg/s --- "
        f"{total.mbit:.3f} Mbit/s --- {total.seconds:.3f} s",
        f"Aggregated end-to-end latency stats --- Latency: {total.latency.text()}",
    ]


def topic_names(topic: str, count: int) -> list[str]:
    """``count`` topics named from ``topic``: itself when 1, else ``topic-0`` .. (as pulsar-perf)."""
    if count < 1:
        raise ValueError("the number of topics is at least 1")
    return [topic] if count == 1 else [f"{topic}-{i}" for i in range(count)]


def all_topics(topics: tuple[str, ...] | list[str], count: int) -> list[str]:
    """Every topic the command works on: each given topic expanded by ``topic_names``."""
    return [name for topic in topics for name in topic_names(topic, count)]
