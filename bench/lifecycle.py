"""Benchmark: how long the official client waits for a producer or consumer to open and close.

The interop tests check that closes, unsubscribes and creations complete (at the broker); how
long they take is measured here instead, on Magnetar (fsync on, its default) and the peer
(``pulsar-lite``, when installed) side by side in one run, with the same official client. Each
round, on a topic of its own: create a producer, subscribe a consumer, send one message and
receive it, close the producer, close the consumer, subscribe again and unsubscribe. Prints one
JSON object: per broker and step, p50/p99/max in milliseconds over ``--rounds`` rounds.

    .venv/bin/python -m bench.lifecycle                 # 200 rounds on each broker
    .venv/bin/python -m bench.lifecycle --rounds 20
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pulsar

from bench.brokers import PEER, SPECS, MagnetarSource, make_process, peer_installed
from bench.machine import describe
from bench.output import emit

STEPS = ("create_producer", "subscribe", "close_producer", "close_consumer", "unsubscribe")


def _timed(times: dict[str, list[float]], step: str, call: Callable[[], object]) -> object:
    started = time.perf_counter()
    result = call()
    times[step].append((time.perf_counter() - started) * 1000)
    return result


def one_round(client: pulsar.Client, times: dict[str, list[float]]) -> None:
    """One topic's producer and consumer, opened, used once and closed, each step timed."""
    topic = f"persistent://public/default/lifecycle-{uuid.uuid4().hex[:12]}"
    producer = _timed(times, "create_producer", lambda: client.create_producer(topic))
    consumer = _timed(times, "subscribe", lambda: client.subscribe(topic, "s"))
    producer.send(b"one")
    if consumer.receive(30_000).data() != b"one":
        raise RuntimeError(f"{topic}: the one message did not come back")
    _timed(times, "close_producer", producer.close)
    _timed(times, "close_consumer", consumer.close)
    again = client.subscribe(topic, "s")
    _timed(times, "unsubscribe", again.unsubscribe)


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50": statistics.median(ordered), "p99": p99, "max": ordered[-1], "n": len(ordered)}


def measure(name: str, workdir: Path, rounds: int) -> dict:
    broker = make_process(SPECS[name], workdir / name, MagnetarSource.working_tree()).start()
    logger = logging.getLogger("pulsar")
    logger.setLevel(logging.WARNING)
    try:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=60, logger=logger)
        times: dict[str, list[float]] = {step: [] for step in STEPS}
        try:
            one_round(client, {step: [] for step in STEPS})  # warm-up: connection and first topic
            for _ in range(rounds):
                one_round(client, times)
        finally:
            client.close()
        return {"broker": name, "steps_ms": {step: percentiles(times[step]) for step in STEPS}}
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    names = ["magnetar-fsync"] + ([PEER] if peer_installed() else [])
    with tempfile.TemporaryDirectory(prefix="magnetar-lifecycle-") as tmp:
        results = [measure(name, Path(tmp), args.rounds) for name in names]
    doc = {
        "benchmark": "lifecycle",
        "machine": describe(),
        "rounds": args.rounds,
        "peer": "measured" if peer_installed() else "pulsar-lite is not installed",
        "results": results,
    }
    emit(doc, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
