"""The coordinator: broker, workers, producer, and the one JSON document out.

Steps, each measured:
1. start the broker (Magnetar or the peer, ``target.py``) and an official-client producer
   (which creates the topic; it chunks messages above a small ``max_message_size``); note the
   broker's RSS;
2. start the workers (spawned processes) and, once all are ready, tell them to connect at once:
   the *connect time* is from that moment to the last worker's "all subscribed" (and each
   worker's own); RSS again, and the difference over the consumers is RSS per consumer;
3. send ``messages`` messages of ``size`` bytes at ``rate`` per second while sampling the
   broker's CPU; the window ends when every worker says each of its consumers has everything
   (or at ``timeout``); CPU per delivery is the window's CPU over the deliveries;
4. ask each worker for its counts and histograms and merge them, the official slice apart.

``mode`` is ``broadcast`` (one subscription, every consumer with a place of its own) or
``exclusive`` (an Exclusive subscription per consumer); ``stalled`` percent of the lean
consumers stop reading after their first message, and the every-consumer-got-everything check
and the latencies are then over the others.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

import pulsar

from bench.brokers import MagnetarSource, make_process
from bench.lean.histogram import LatencyHistogram
from bench.lean.limits import raise_nofile
from bench.lean.official import official_main
from bench.lean.probe import Probe
from bench.lean.spread import make_spread, sockets_per_process
from bench.lean.stamp import payload
from bench.lean.target import broker_spec, broker_version
from bench.lean.worker import WorkerSpec, worker_main
from bench.machine import describe
from bench.procs import Usage, UsageSampler, cpu_seconds, tree_memory_kib

SUBSCRIPTION = "vehicles"
CONNECTIONS_PER_SOURCE_IP = 10_000  # well below the kernel's ~28K ephemeral ports per address
SETTLE_S = 1.0  # after the last subscribe, before RSS is read: replies and buffers drained


@dataclass
class Settings:
    consumers: int = 1000
    processes: int = 2
    per_connection: int = 1
    official: int = 0
    messages: int = 100
    size: int = 1024
    rate: float = 10.0
    permits: int = 1000
    ack_every: int = 1
    concurrency: int = 256
    timeout: float = 120.0
    fsync: str = "always"
    official_first: bool = False
    mode: str = "broadcast"
    broker: str = "magnetar"
    stalled: float = 0.0
    max_message_size: int = 0
    no_probe: bool = False
    workers: int = 1
    lookup: bool = False


@dataclass
class Worker:
    spec: WorkerSpec
    process: multiprocessing.process.BaseProcess
    pipe: Connection
    kind: str
    ready: dict | None = None
    subscribed: dict | None = None
    subscribed_at: float = 0.0
    done_at: float | None = None
    report: dict | None = None
    cpu_s: float = 0.0  # the process's CPU seconds over the delivery window


def run(settings: Settings, workdir: Path | None = None) -> dict:
    """One run; the report as a dict (see ``report.py`` for its markdown form)."""
    raise_nofile(settings.consumers + 8192)  # inherited: the broker raises its soft limit to it
    source = MagnetarSource.working_tree()
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-lean-") as tmp:
        base = workdir or Path(tmp)
        spec = broker_spec(settings.broker, settings.fsync, settings.max_message_size, settings.workers)
        broker = make_process(spec, base / "broker", source)
        broker.start()
        workers: list[Worker] = []
        client = None
        try:
            client = pulsar.Client(
                broker.service_url,
                operation_timeout_seconds=120,
                logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(base / "producer.log")),
            )
            topic = f"persistent://public/default/lean-{settings.mode}-{int(time.time())}"
            producer = client.create_producer(
                topic,
                batching_enabled=False,
                chunking_enabled=settings.max_message_size > 0,
                block_if_queue_full=True,
                send_timeout_millis=int(settings.timeout * 1000),  # a broker that refuses ends the run
            )
            probe = None if settings.no_probe else Probe(client, f"{topic}-probe")
            if probe is not None:
                probe.__enter__()
            if settings.workers > 1:
                make_spread(client, broker, topic)  # its consumers then stay where they connect
            time.sleep(SETTLE_S)
            rss_before = tree_memory_kib(broker.pid)["VmRSS"]
            workers = _start_workers(settings, broker.port, topic, base)
            storm_at = time.monotonic()
            connect = _connect(workers, settings.official_first)
            storm_end = time.monotonic()
            time.sleep(SETTLE_S)
            rss_after = tree_memory_kib(broker.pid)["VmRSS"]
            if settings.workers > 1:
                connect["sockets_per_worker"] = sockets_per_process(broker)
            with UsageSampler(broker.pid, tree=True) as sampler:
                for worker in workers:
                    worker.cpu_s = -cpu_seconds(worker.process.pid)
                start = time.monotonic()
                _produce(producer, settings)
                sent_s = time.monotonic() - start
                _await_done(workers, start + settings.timeout)
                elapsed = time.monotonic() - start
                usage = sampler.usage()
                for worker in workers:
                    worker.cpu_s += cpu_seconds(worker.process.pid)
            if probe is not None:
                probe.__exit__(None, None, None)
                connect["probe"] = {
                    "before": probe.phase(0.0, storm_at),
                    "storm": probe.phase(storm_at, storm_end),
                    "deliveries": probe.phase(start, start + elapsed),
                    "failed_sends": probe.failures,
                }
            _collect(workers)
        finally:
            if client is not None:
                client.close()
            for worker in workers:
                worker.pipe.close()  # a worker still waiting for a command sees EOF and ends
            for worker in workers:
                worker.process.join(30)
                if worker.process.is_alive():
                    worker.process.kill()
            broker.stop()
    return _document(
        settings,
        source,
        load_at_start,
        workers,
        connect,
        rss_before,
        rss_after,
        usage,
        sent_s,
        elapsed,
        start,
    )


def _start_workers(settings: Settings, port: int, topic: str, base: Path) -> list[Worker]:
    context = multiprocessing.get_context("spawn")
    lean = settings.consumers - settings.official
    shares = [
        lean // settings.processes + (1 if i < lean % settings.processes else 0)
        for i in range(settings.processes)
    ]
    connections = -(-lean // settings.per_connection)
    stalled = stalled_connections(settings)
    ips = -(-connections // CONNECTIONS_PER_SOURCE_IP)
    source_ips = tuple(f"127.0.0.{2 + i}" for i in range(ips)) if ips > 1 else ()
    workers = []
    first = 0
    kinds = [("lean", n) for n in shares if n] + (
        [("official", settings.official)] if settings.official else []
    )
    for index, (kind, count) in enumerate(kinds):
        spec = WorkerSpec(
            index=index,
            port=port,
            topic=topic,
            subscription=SUBSCRIPTION,
            name_prefix="vehicle",
            first_global=first,
            consumers=count,
            per_connection=settings.per_connection,
            messages=settings.messages,
            permits=settings.permits,
            ack_every=settings.ack_every,
            concurrency=settings.concurrency,
            source_ips=source_ips,
            exclusive=settings.mode == "exclusive",
            stalled_connections=stalled[index] if kind == "lean" else 0,
            chunked=settings.max_message_size > 0,
            size=settings.size,
            lookup=settings.lookup,
        )
        first += count
        parent, child = context.Pipe()
        if kind == "lean":
            process = context.Process(target=worker_main, args=(child, spec), name=f"lean-{index}")
        else:
            process = context.Process(
                target=official_main, args=(child, spec, str(base / "official.log")), name="official"
            )
        process.start()
        child.close()
        workers.append(Worker(spec, process, parent, kind))
    for worker in workers:
        worker.ready = _receive(worker, "ready", 120)
    return workers


def stalled_connections(settings: Settings) -> list[int]:
    """Per lean worker, how many of its connections stall: ``stalled`` percent of them, rounded."""
    lean = settings.consumers - settings.official
    out = []
    for i in range(settings.processes):
        share = lean // settings.processes + (1 if i < lean % settings.processes else 0)
        connections = -(-share // settings.per_connection)
        out.append(min(connections, round(connections * settings.stalled / 100)))
    return out


def _receive(worker: Worker, name: str, timeout: float) -> dict:
    if not worker.pipe.poll(timeout):
        raise TimeoutError(f"worker {worker.spec.index} sent no {name!r} within {timeout}s")
    kind, body = worker.pipe.recv()
    if kind != name:
        raise RuntimeError(f"worker {worker.spec.index}: expected {name!r}, got {kind!r}")
    return body


def _connect(workers: list[Worker], official_first: bool) -> dict:
    """Tell the workers to connect; time until the last is subscribed.

    The lean workers start at once. The official slice joins after them (default), so that it
    sits at the end of the dispatcher's order of consumers and its latency is the worst a real
    client sees, not the best; with ``official_first`` it starts together with the lean ones.
    """
    start = time.monotonic()
    lean = [w for w in workers if w.kind == "lean"]
    official = [w for w in workers if w.kind != "lean"]
    waves = [workers] if official_first else [lean, official]
    lean_done = start
    for wave in waves:
        for worker in wave:
            worker.pipe.send(("go",))
        waiting = {w.pipe: w for w in wave}
        while waiting:
            for pipe in wait(list(waiting), 600):
                worker = waiting.pop(pipe)  # type: ignore[arg-type]
                kind, body = pipe.recv()  # type: ignore[union-attr]
                if kind != "subscribed":
                    raise RuntimeError(f"worker {worker.spec.index}: expected 'subscribed', got {kind!r}")
                worker.subscribed, worker.subscribed_at = body, time.monotonic()
        if wave is lean or wave is workers:
            lean_done = max((w.subscribed_at for w in lean), default=start)
    return {
        "all_subscribed_s": round(max(w.subscribed_at for w in workers) - start, 3),
        "lean_all_subscribed_s": round(lean_done - start, 3),
        "official_joined": "first" if official_first else "last",
        "failed_consumers": sum(w.subscribed["failed"] for w in workers if w.subscribed),
    }


def _produce(producer: pulsar.Producer, settings: Settings) -> None:
    start = time.monotonic()
    for seq in range(settings.messages):
        due = start + seq / settings.rate
        if (pause := due - time.monotonic()) > 0:
            time.sleep(pause)
        producer.send_async(payload(seq, settings.size), None)
    producer.flush()


def _await_done(workers: list[Worker], deadline: float) -> None:
    waiting = {w.pipe: w for w in workers}
    while waiting and (left := deadline - time.monotonic()) > 0:
        for pipe in wait(list(waiting), left):
            worker = waiting.pop(pipe)  # type: ignore[arg-type]
            kind, _ = pipe.recv()  # type: ignore[union-attr]
            if kind == "done":
                worker.done_at = time.monotonic()


def _collect(workers: list[Worker]) -> None:
    for worker in workers:
        worker.pipe.send(("report",))
    for worker in workers:
        worker.report = _receive(worker, "report", 120)


def _add(into: dict[str, float], part: dict | None, largest: tuple[str, ...] = ()) -> None:
    for key, value in (part or {}).items():
        into[key] = max(into.get(key, 0), value) if key in largest else into.get(key, 0) + value


def _merge(reports: list[dict]) -> dict:
    tally: dict[str, float] = {}
    stalled: dict[str, float] = {}
    chunks: dict[str, float] = {}
    broker, publish = LatencyHistogram(), LatencyHistogram()
    for report in reports:
        _add(tally, report["tally"])
        _add(stalled, report.get("stalled"), ("max_received",))
        _add(chunks, report.get("chunks"))
        broker.merge(LatencyHistogram.from_state(report["from_broker"]))
        publish.merge(LatencyHistogram.from_state(report["from_publish"]))
    return {
        "correctness": tally,
        "stalled": stalled if stalled.get("consumers") else None,
        "chunks": chunks or None,
        "latency_ms": {
            "from_broker_timestamp": broker.summary_ms(),
            "from_publish_time": publish.summary_ms(),
        },
    }


def _document(
    settings: Settings,
    source: MagnetarSource,
    load_at_start: tuple[float, float, float],
    workers: list[Worker],
    connect: dict,
    rss_before: int,
    rss_after: int,
    usage: Usage,
    sent_s: float,
    elapsed: float,
    start: float,
) -> dict:
    reports = [w.report for w in workers if w.report is not None]
    lean = _merge([r for r in reports if r["kind"] == "lean"])
    official = _merge([r for r in reports if r["kind"] == "official"]) if settings.official else None
    deliveries = lean["correctness"].get("deliveries", 0) + (
        official["correctness"]["deliveries"] if official else 0
    )
    lean_deliveries = lean["correctness"].get("deliveries", 0)
    lean_cpu = sum(w.cpu_s for w in workers if w.kind == "lean")
    connected = max(1, settings.consumers - connect["failed_consumers"])
    per_process = [
        {
            "worker": w.spec.index,
            "kind": w.kind,
            "consumers": w.spec.consumers,
            "loop": (w.ready or {}).get("loop"),
            "connect_s": (w.subscribed or {}).get("connect_s"),
            "done_s": round(w.done_at - start, 3) if w.done_at is not None else None,
            "cpu_s": round(w.cpu_s, 3),
            "errors": (w.report or {}).get("errors", []),
            "closed_by_broker": (w.report or {}).get("closed_by_broker", 0),
        }
        for w in workers
    ]
    stalled = lean["stalled"] or {}
    everything = (settings.consumers - stalled.get("consumers", 0)) * settings.messages
    chunk_faults = sum(
        v for m in (lean, official) if m and m["chunks"] for k, v in m["chunks"].items() if k != "chunks"
    )
    correct = (
        deliveries == everything
        and chunk_faults == 0
        and all(
            m is None or (m["correctness"].get("duplicates", 0) == 0 and m["correctness"].get("gaps", 0) == 0)
            for m in (lean, official)
        )
    )
    clean = sum(m["correctness"].get("clean", 0) for m in (lean, official) if m)
    return {
        "benchmark": "bench.lean: broadcast subscription, raw-frame consumers",
        "machine": describe(),
        "load_average_at_start": [round(x, 2) for x in load_at_start],
        "magnetar": source.version(),
        "broker_under_test": broker_version(settings.broker, source),
        "settings": vars(settings),
        "connect": {**connect, "per_process": per_process},
        "broker": {
            "rss_before_consumers_kib": rss_before,
            "rss_after_consumers_kib": rss_after,
            "rss_per_consumer_kib": round((rss_after - rss_before) / connected, 2),
            "cpu_s": round(usage.cpu_s, 3),
            "cpu_us_per_delivery": round(usage.cpu_s / deliveries * 1e6, 2) if deliveries else None,
            "system_us_per_delivery": round(usage.system_s / deliveries * 1e6, 2) if deliveries else None,
            "peak_rss_kib": usage.peak_rss_kib,
        },
        "delivery": {
            "expected": everything,
            "deliveries": deliveries,
            "send_s": round(sent_s, 3),
            "window_s": round(elapsed, 3),
            "deliveries_per_s": round(deliveries / elapsed, 1) if elapsed else None,
            "every_consumer_got_everything_once_in_order": correct,
            "clean_consumers": clean,
            "subscribed_consumers": settings.consumers - connect["failed_consumers"],
            "chunk_faults": chunk_faults,
        },
        "stalled": stalled if stalled.get("consumers") else None,
        "generator": {
            "lean_cpu_s": round(lean_cpu, 3),
            "lean_cpu_us_per_delivery": round(lean_cpu / lean_deliveries * 1e6, 2)
            if lean_deliveries
            else None,
        },
        "lean": lean,
        "official": official,
    }
