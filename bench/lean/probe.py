"""A producer on another topic, sending all through a run: is the broker still there for others?

While 100K consumers subscribe at once (a connect storm), and while their messages go out, the
broker's other work must not wait behind them. The probe sends a small message every
``interval`` seconds on a topic of its own through the official client and records each send's
round trip (to the receipt, after the entry is on disk), so the report gives the probe's latency
before the storm, during it, and during the deliveries, side by side.
"""

from __future__ import annotations

import threading
import time

import pulsar

from bench.lean.histogram import LatencyHistogram


class Probe:
    def __init__(self, client: pulsar.Client, topic: str, interval: float = 0.02) -> None:
        self._producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=120_000)
        self._interval = interval
        self._stop = threading.Event()
        self._sends: list[tuple[float, float]] = []  # (sent at, round trip in seconds)
        self._failures = 0
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(150)
        self._producer.close()

    def _run(self) -> None:
        payload = b"p" * 100
        while not self._stop.is_set():
            start = time.monotonic()
            try:
                self._producer.send(payload)
                self._sends.append((start, time.monotonic() - start))
            except pulsar.PulsarException:
                self._failures += 1
            self._stop.wait(max(0.0, self._interval - (time.monotonic() - start)))

    def phase(self, start: float, end: float) -> dict:
        """The sends begun in ``[start, end)``: how many, and their round trip in ms."""
        histogram = LatencyHistogram()
        for at, took in self._sends:
            if start <= at < end:
                histogram.record(int(took * 1e6))
        return histogram.summary_ms()

    @property
    def failures(self) -> int:
        return self._failures
