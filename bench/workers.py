"""Benchmark: a partitioned topic's produce and consume throughput with 1 and N workers, side by
side in one run (``magnetar standalone --workers N``), so the ratio is measured on one machine.

Each broker gets a fresh data directory and an 8-partition topic. Produce: ``--producers`` client
processes (multiprocessing: one official client each, so the clients are not one GIL's) send
``--size``-byte messages asynchronously, batched, round-robin over the partitions, for
``--seconds``; the figure is receipts per second from the first client's start to the last
one's flush. Consume: ``--consumers`` processes drain what
was produced through one Shared subscription made before producing; the figure is messages per
second from the first to the last received. Broker CPU is the CPU seconds of the broker's whole
process tree over each phase: the supervisor and its workers, every thread of each, and any child
already reaped (``bench.procs.tree_cpu_seconds``); the clients' CPU (each client process's own
``getrusage``, the official client's threads included) and the machine's busy CPU
(``/proc/stat``) are measured over the same phase, so the three can be checked against each other.
The producers batch, so the broker's work is per entry (a batch) more than per message: the
report gives the entries the topic stored and the broker's CPU per entry and per message. Prints
one JSON object (the machine included).

    .venv/bin/python -m bench.workers                          # workers 1 and 2, 20 s each phase
    .venv/bin/python -m bench.workers --workers 1 2 4 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pulsar

from bench.machine import describe
from bench.plots import workers_svg
from bench.procs import CLOCK_TICKS, tree_cpu_seconds
from bench.svg import write
from magnetar.broker_process import BrokerProcess
from magnetar.client.admin import AdminClient

PARTITIONS = 8
SUBSCRIPTION = "bench"
#: A consumer that hears nothing for this long has drained its share.
IDLE_MS = 3000


def _quiet() -> logging.Logger:
    """The official client's log, warnings only (its INFO lines would bury the report)."""
    logger = logging.getLogger("bench.workers.client")
    logger.setLevel(logging.WARNING)
    return logger


def produce(service_url: str, topic: str, size: int, seconds: float, results) -> None:
    """One client process: send for ``seconds`` (up to 1,000 pending), count the receipts."""
    client = pulsar.Client(service_url, operation_timeout_seconds=60, logger=_quiet())
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_publish_delay_ms=5,
        max_pending_messages=1000,
        block_if_queue_full=True,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    payload = b"x" * size
    done = [0]

    def receipt(result, _msg_id) -> None:
        if result == pulsar.Result.Ok:
            done[0] += 1

    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        producer.send_async(payload, receipt)
    producer.flush()
    results.put((done[0], start, time.monotonic(), own_cpu()))
    client.close()


def consume(service_url: str, topic: str, results) -> None:
    """One client process: receive until idle; (count, first, last receive times)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=60, logger=_quiet())
    consumer = client.subscribe(
        topic, SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5000
    )
    count, first, last = 0, None, None
    while True:
        try:
            message = consumer.receive(IDLE_MS)
        except pulsar.Timeout:
            break
        last = time.monotonic()
        first = last if first is None else first
        count += 1
        consumer.acknowledge(message)
    results.put((count, first, last, own_cpu()))
    client.close()


def own_cpu() -> float:
    """This client process's CPU seconds so far, every thread (the official client's included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def broker_cpu(broker: BrokerProcess) -> float:
    """CPU seconds of the broker's process tree: the supervisor and its workers, all threads."""
    assert broker.proc is not None
    return tree_cpu_seconds(broker.proc.pid)


def machine_busy() -> float:
    """CPU seconds the machine spent on anything but idle and I/O wait, all cores (``/proc/stat``)."""
    with open("/proc/stat") as stat:
        fields = [int(f) for f in stat.readline().split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / CLOCK_TICKS


def stored_entries(admin: AdminClient, topic: str) -> int:
    """Entries (batches) the partitions' ledgers hold now."""
    return sum(
        admin.topics.internal_stats(f"{topic}-partition-{i}")["numberOfEntries"] for i in range(PARTITIONS)
    )


class Phase:
    """CPU seconds over one phase: the broker's tree, the machine's busy time, and wall time."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.broker0, self.machine0, self.wall0 = broker_cpu(broker), machine_busy(), time.monotonic()

    def end(self, clients_cpu: float, messages: int, entries: int) -> dict[str, Any]:
        broker = broker_cpu(self.broker) - self.broker0
        return {
            "wall_s": round(time.monotonic() - self.wall0, 1),
            "broker_cpu_s": round(broker, 2),
            "clients_cpu_s": round(clients_cpu, 2),
            "machine_busy_cpu_s": round(machine_busy() - self.machine0, 2),
            "broker_us_per_msg": round(broker / messages * 1e6, 1) if messages else None,
            "broker_us_per_entry": round(broker / entries * 1e6, 1) if entries else None,
        }


def run_all(ctx: Any, results: Any, target: Any, args: tuple[Any, ...], count: int) -> list[Any]:
    """``count`` client processes running ``target(*args)``; what each put on ``results``."""
    procs = [ctx.Process(target=target, args=args) for _ in range(count)]
    for proc in procs:
        proc.start()
    found = [results.get() for _ in procs]
    for proc in procs:
        proc.join()
    return found


def run_one(workers: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    broker = BrokerProcess(workdir / f"w{workers}", {"workers": workers}).start()
    try:
        topic = f"persistent://public/default/bench-{workers}"
        AdminClient(broker.http_url).topics.create_partitioned_topic(topic, PARTITIONS)
        ctx = multiprocessing.get_context("spawn")
        setup = pulsar.Client(broker.service_url, logger=_quiet())
        setup.subscribe(topic, SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Shared).close()
        setup.close()
        results = ctx.Queue()
        admin = AdminClient(broker.http_url)
        phase = Phase(broker)
        sending = (broker.service_url, topic, args.size, args.seconds, results)
        runs = run_all(ctx, results, produce, sending, args.producers)
        sent = sum(run[0] for run in runs)
        # From the first client's start to the last one's flush: the clients' start-up left out.
        produce_s = max(run[2] for run in runs) - min(run[1] for run in runs)
        entries = stored_entries(admin, topic)
        produce_cpu = phase.end(sum(run[3] for run in runs), sent, entries)
        phase = Phase(broker)
        got = run_all(ctx, results, consume, (broker.service_url, topic, results), args.consumers)
        received = sum(run[0] for run in got)
        firsts = [run[1] for run in got if run[1] is not None]
        lasts = [run[2] for run in got if run[2] is not None]
        consume_s = (max(lasts) - min(firsts)) if firsts else 0.0
        consume_cpu = phase.end(sum(run[3] for run in got), received, entries)
        return {
            "workers": workers,
            "produced": sent,
            "entries": entries,
            "produce_msg_s": round(sent / produce_s),
            "produce_cpu": produce_cpu,
            "received": received,
            "consume_msg_s": round(received / consume_s) if consume_s else None,
            "consume_cpu": consume_cpu,
        }
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--plot", type=Path, help="throughput against workers as SVG (default: beside --out)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        results = [run_one(n, args, Path(tmp)) for n in args.workers]
    base = results[0]
    for result in results:
        for key in ("produce_msg_s", "consume_msg_s"):
            if base[key] and result[key]:
                result[key.replace("msg_s", "ratio")] = round(result[key] / base[key], 2)
    doc = {
        "machine": describe(),
        "partitions": PARTITIONS,
        "size": args.size,
        "seconds": args.seconds,
        "producers": args.producers,
        "consumers": args.consumers,
        "results": results,
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    plot = args.plot or (args.out.with_suffix(".svg") if args.out is not None else None)
    if plot is not None:
        rows = [(r["workers"], r["produce_msg_s"], r["consume_msg_s"] or 0.0) for r in results]
        print(f"wrote {write(plot, workers_svg(rows))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
