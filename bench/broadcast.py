"""Benchmark: one message to many consumers (capability 4), with the official client.

The NTT smart-city case: one producer, N consumers that must each receive every message. Three
ways are measured in one run, each on a fresh broker:

- ``magnetar-broadcast``: Magnetar, one broadcast subscription for all N consumers (virtual
  cursors, one read per entry);
- ``magnetar-subscriptions``: Magnetar, one Exclusive subscription per consumer (the seed's
  Figure 8, the only way on Pulsar);
- ``pulsar-lite-subscriptions``: the peer the same way (it has no broadcast subscription).

For each: the time to connect the N consumers (the seed's "connection time"), then the producer
sends ``--messages`` messages of ``--size`` bytes at ``--rate`` per second; every consumer
acknowledges each message; the latency of every (consumer, message) receipt from the send; the
broker's CPU seconds over the sending and delivery; peak RSS; and correctness (each consumer
must get each message once, in order). Prints one JSON document (``--out`` writes it too).

    .venv/bin/python -m bench.broadcast --consumers 1000 --messages 200
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

import pulsar

from bench.brokers import MAGNETAR, PEER, SPECS, BrokerSpec, MagnetarSource, make_process, peer_installed
from bench.hotspots import start_profiler, stop_profiler
from bench.machine import describe
from bench.output import emit
from bench.plots import broadcast_latency_svg
from bench.procs import UsageSampler
from bench.svg import write

BROADCAST = {"magnetar.subscription.type": "Broadcast"}
STAMP = struct.Struct(">qi")  # send time (ns), sequence number


class Receiver:
    """What every consumer received: latencies and order, counted from listener threads."""

    def __init__(self, consumers: int, messages: int) -> None:
        self.lock = threading.Lock()
        self.latencies_ms: list[float] = []
        self.next_expected = [0] * consumers
        self.out_of_order = 0
        self.duplicates = 0
        self.received = 0
        self.expected = consumers * messages
        self.done = threading.Event()

    def listener(self, index: int):
        def on_message(consumer, msg) -> None:
            now = time.time_ns()
            sent_ns, seq = STAMP.unpack_from(msg.data())
            with self.lock:
                expected = self.next_expected[index]
                if seq < expected:
                    self.duplicates += 1
                else:
                    if seq > expected:
                        self.out_of_order += 1
                    self.next_expected[index] = seq + 1
                    self.received += 1
                    self.latencies_ms.append((now - sent_ns) / 1e6)
                    if self.received >= self.expected:
                        self.done.set()
            consumer.acknowledge(msg)

        return on_message


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_one(
    name: str,
    spec: BrokerSpec,
    broadcast: bool,
    args: argparse.Namespace,
    source: MagnetarSource,
    workdir: Path,
) -> dict:
    broker = make_process(spec, workdir / name, source).start()
    clients: list[pulsar.Client] = []
    profiler = None
    result: dict = {"name": name, "broker": spec.name, "broadcast": broadcast}
    try:
        logger = pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(workdir / f"{name}-client.log"))
        clients = [
            pulsar.Client(broker.service_url, operation_timeout_seconds=60, logger=logger)
            for _ in range(args.clients)
        ]
        topic = f"persistent://public/default/broadcast-bench-{int(time.time())}"
        receiver = Receiver(args.consumers, args.messages)
        start = time.monotonic()
        consumers = []
        for i in range(args.consumers):
            consumers.append(
                clients[i % len(clients)].subscribe(
                    topic,
                    "vehicles" if broadcast else f"vehicle-{i}",
                    consumer_type=pulsar.ConsumerType.Shared if broadcast else pulsar.ConsumerType.Exclusive,
                    consumer_name=f"vehicle-{i}",
                    properties=BROADCAST if broadcast else None,
                    receiver_queue_size=args.receiver_queue,
                    message_listener=receiver.listener(i),
                )
            )
        result["connect_s"] = round(time.monotonic() - start, 3)
        producer = clients[0].create_producer(topic, batching_enabled=False)
        if args.profile is not None and spec.kind == MAGNETAR:
            profiler = start_profiler(broker.pid, args.profile / f"{name}.raw")
        with UsageSampler(broker.pid) as sampler:
            start = time.monotonic()
            padding = b"x" * max(0, args.size - STAMP.size)
            for seq in range(args.messages):
                due = start + seq / args.rate
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                producer.send_async(STAMP.pack(time.time_ns(), seq) + padding, None)
            producer.flush()
            receiver.done.wait(args.timeout)
            elapsed = time.monotonic() - start
            usage = sampler.usage()
        cpu = usage.cpu_s
        deliveries = receiver.received
        result.update(
            deliveries=deliveries,
            missing=receiver.expected - deliveries,
            duplicates=receiver.duplicates,
            out_of_order=receiver.out_of_order,
            elapsed_s=round(elapsed, 3),
            broker_cpu_s=round(cpu, 3),
            broker_cpu_us_per_delivery=round(cpu / deliveries * 1e6, 2) if deliveries else None,
            latency_ms={
                "p50": round(percentile(receiver.latencies_ms, 0.50), 2),
                "p99": round(percentile(receiver.latencies_ms, 0.99), 2),
                "max": round(max(receiver.latencies_ms, default=float("nan")), 2),
                "mean": round(statistics.fmean(receiver.latencies_ms), 2) if receiver.latencies_ms else None,
            },
            peak_rss_mib=round(usage.peak_rss_kib / 1024, 1),
        )
    finally:
        for client in clients:
            with contextlib.suppress(pulsar.PulsarException):
                client.close()
        broker.stop()
        if profiler is not None:
            stop_profiler(profiler)  # written when the broker ends: `python -m bench.hotspots DIR/*.raw`
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--consumers", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=50.0, help="messages per second")
    parser.add_argument(
        "--clients", type=int, default=10, help="client objects (connections) for the consumers"
    )
    parser.add_argument("--receiver-queue", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for every delivery")
    parser.add_argument("--fsync", choices=["always", "never"], default="always")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path, help="the latency distribution as SVG (default: beside --out)")
    parser.add_argument("--profile", type=Path, help="py-spy profiles of the Magnetar brokers into this dir")
    args = parser.parse_args(argv)
    spec = SPECS["magnetar-fsync" if args.fsync == "always" else "magnetar-nofsync"]
    variants = [("magnetar-broadcast", spec, True), ("magnetar-subscriptions", spec, False)]
    if peer_installed():
        variants.append(("pulsar-lite-subscriptions", SPECS[PEER], False))
    source = MagnetarSource.working_tree()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-broadcast-") as tmp:
        for name, broker_spec, broadcast in variants:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            results.append(run_one(name, broker_spec, broadcast, args, source, Path(tmp)))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    document = {
        "machine": describe(),
        "magnetar": source.version(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "results": results,
    }
    emit(document, args.out)
    plot = args.plot or (args.out.with_suffix(".svg") if args.out is not None else None)
    if plot is not None:
        shown = [
            (r["name"], r["latency_ms"]["p50"], r["latency_ms"]["p99"], r["latency_ms"]["max"])
            for r in results
            if r.get("latency_ms")
        ]
        print(f"wrote {write(plot, broadcast_latency_svg(shown, args.consumers))}", file=sys.stderr)
    failed = [r["name"] for r in results if r.get("missing") or r.get("duplicates") or r.get("out_of_order")]
    if failed:
        print(f"FAILED correctness: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
