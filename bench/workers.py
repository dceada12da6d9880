"""Benchmark: a partitioned topic's produce and consume throughput with 1 and N workers, side by
side in one run (``magnetar standalone --workers N``), so the ratio is measured on one machine.

Each broker gets a fresh data directory and an 8-partition topic. Produce: ``--producers`` client
processes (multiprocessing: one official client each, so the clients are not one GIL's) send
``--size``-byte messages asynchronously, batched, round-robin over the partitions, for
``--seconds``; the figure is receipts per second from the first client's start to the last
one's flush. Consume: ``--consumers`` processes drain what
was produced through one Shared subscription made before producing; the figure is messages per
second from the first to the last received. Broker CPU is the supervisor's and workers' CPU
seconds over each phase (``bench.procs``). Prints one JSON object (the machine included).

    .venv/bin/python -m bench.workers                          # workers 1 and 2, 20 s each phase
    .venv/bin/python -m bench.workers --workers 1 2 4 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pulsar

from bench.machine import describe
from bench.procs import tree_cpu_split
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
    results.put((done[0], start, time.monotonic()))
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
    results.put((count, first, last))
    client.close()


def broker_cpu(broker: BrokerProcess) -> float:
    """CPU seconds of the broker's processes: the supervisor and its workers."""
    assert broker.proc is not None
    pid = broker.proc.pid
    return sum(tree_cpu_split(pid))


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
        cpu0 = broker_cpu(broker)
        sending = (broker.service_url, topic, args.size, args.seconds, results)
        runs = run_all(ctx, results, produce, sending, args.producers)
        sent = sum(count for count, _, _ in runs)
        # From the first client's start to the last one's flush: the clients' start-up left out.
        produce_s = max(e for _, _, e in runs) - min(s for _, s, _ in runs)
        produce_cpu = broker_cpu(broker) - cpu0
        cpu0 = broker_cpu(broker)
        got = run_all(ctx, results, consume, (broker.service_url, topic, results), args.consumers)
        received = sum(count for count, _, _ in got)
        firsts = [f for _, f, _ in got if f is not None]
        lasts = [last for _, _, last in got if last is not None]
        consume_s = (max(lasts) - min(firsts)) if firsts else 0.0
        consume_cpu = broker_cpu(broker) - cpu0
        return {
            "workers": workers,
            "produced": sent,
            "produce_msg_s": round(sent / produce_s),
            "produce_broker_cpu_s": round(produce_cpu, 1),
            "received": received,
            "consume_msg_s": round(received / consume_s) if consume_s else None,
            "consume_broker_cpu_s": round(consume_cpu, 1),
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
