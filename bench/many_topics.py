"""Benchmark: many topics, each given one message by a producer that then closes (issue 40).

The smart-city layout (a topic per device): ``--topics`` topics, each created by a producer of the
official client that sends one message and closes, spread over ``--clients`` processes of
``--threads`` threads each so that the client is not the limit; then a consumer round (each topic's
message read once, by a new subscription from the earliest message); then ``--idle`` seconds in
which nobody uses them (Magnetar unloads a topic idle for 60 s, its sweep every 60 s); then a
restart with every topic on disk: the time to listening (and the broker's CPU seconds by then) and
the time to the first message of a topic. Magnetar (defaults) and the peer (``pulsar-lite``,
when installed) side by side in one run. Per phase: the time, errors, the broker's descriptors
(``/proc/PID/fd``) and its RSS per topic. Prints one JSON object.

    .venv/bin/python -m bench.many_topics                     # 100,000 topics on each broker
    .venv/bin/python -m bench.many_topics --topics 10000
    .venv/bin/python -m bench.many_topics --topics 10000 --workers 2   # and with 2 worker processes
    .venv/bin/python -m bench.many_topics --only magnetar-workers --workers 2   # that one alone

With ``--workers`` the descriptors and RSS are the supervisor's and its workers' together.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import pulsar

from bench.brokers import MAGNETAR, PEER, SPECS, BrokerSpec, MagnetarSource, make_process, peer_installed
from bench.machine import describe
from bench.output import emit
from bench.procs import BrokerProcess, descendants, memory_kib, tree_cpu_seconds

START_TIMEOUT_S = 600.0


def topic_name(i: int) -> str:
    return f"persistent://public/default/device-{i:06d}"


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger("pulsar")
    logger.setLevel(logging.ERROR)
    return logger


def _produce(client: pulsar.Client, i: int) -> None:
    producer = client.create_producer(topic_name(i))
    producer.send(f"reading {i}".encode())
    producer.close()


def _consume(client: pulsar.Client, i: int) -> None:
    consumer = client.subscribe(topic_name(i), "round", initial_position=pulsar.InitialPosition.Earliest)
    message = consumer.receive(60_000)
    if message.data() != f"reading {i}".encode():
        raise RuntimeError(f"{topic_name(i)}: read {message.data()!r}")
    consumer.acknowledge(message)
    consumer.close()


def client_share(phase: str, url: str, indexes: list[int], threads: int) -> list[str]:
    """One client process: its topics over ``threads`` threads; the errors it met (one line each)."""
    step = _produce if phase == "produce" else _consume
    client = pulsar.Client(url, operation_timeout_seconds=30, logger=_quiet_logger())
    errors: list[str] = []
    lock = threading.Lock()
    work = iter(indexes)

    def run() -> None:
        while True:
            with lock:
                i = next(work, None)
            if i is None:
                return
            try:
                step(client, i)
            except Exception as exc:
                with lock:
                    errors.append(f"{topic_name(i)}: {type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    client.close()
    return errors


def descriptors(pid: int) -> int:
    """The descriptors of ``pid`` and of the processes under it (a supervisor's workers)."""
    return sum(len(os.listdir(f"/proc/{each}/fd")) for each in [pid, *descendants(pid)])


def rss_kib(pid: int) -> int:
    """The RSS of ``pid`` and of the processes under it (a supervisor's workers)."""
    return sum(memory_kib(each)["VmRSS"] for each in [pid, *descendants(pid)])


def snapshot(broker: BrokerProcess, rss0_kib: int, topics: int) -> dict[str, object]:
    rss = rss_kib(broker.pid)
    return {
        "descriptors": descriptors(broker.pid),
        "rss_mib": round(rss / 1024, 1),
        "rss_per_topic_kib": round((rss - rss0_kib) / topics, 2),
    }


def phase(broker: BrokerProcess, name: str, args: argparse.Namespace, rss0_kib: int) -> dict[str, object]:
    shares = [list(range(k, args.topics, args.clients)) for k in range(args.clients)]
    started = time.monotonic()
    with multiprocessing.get_context("spawn").Pool(args.clients) as pool:
        results = pool.starmap(client_share, [(name, broker.service_url, s, args.threads) for s in shares])
    elapsed = time.monotonic() - started
    errors = [e for result in results for e in result]
    return {
        "seconds": round(elapsed, 1),
        "topics_per_s": round(args.topics / elapsed, 1),
        "errors": len(errors),
        "first_errors": errors[:3],
        **snapshot(broker, rss0_kib, args.topics),
    }


def first_message(url: str, i: int) -> float:
    """Seconds from here to the one message of topic ``i``, read by a new reader."""
    started = time.monotonic()
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=_quiet_logger())
    try:
        reader = client.create_reader(topic_name(i), pulsar.MessageId.earliest)
        reader.read_next(60_000)
        return time.monotonic() - started
    finally:
        client.close()


def spec_of(name: str, workers: int) -> BrokerSpec:
    """The broker ``name`` (``magnetar-fsync``, the peer) or, for ``magnetar-workers``, Magnetar
    with its defaults and ``workers`` processes under a supervisor."""
    if name == "magnetar-workers":
        about = f"Magnetar, fsync_policy = always, {workers} workers"
        return BrokerSpec(name, MAGNETAR, {"fsync_policy": "always", "workers": workers}, about)
    return SPECS[name]


def gone(pids: list[int], timeout_s: float = 120.0) -> None:
    """Return once none of ``pids`` is alive (or after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def measure(name: str, workdir: Path, args: argparse.Namespace, source: MagnetarSource) -> dict[str, object]:
    broker = make_process(spec_of(name, args.workers), workdir / name, source)
    broker.start(START_TIMEOUT_S)
    try:
        rss0 = rss_kib(broker.pid)
        result: dict[str, object] = {"broker": name, "empty": {"descriptors": descriptors(broker.pid)}}
        result["produce"] = phase(broker, "produce", args, rss0)
        result["consume"] = phase(broker, "consume", args, rss0)
        if args.idle:
            time.sleep(args.idle)  # nobody uses the topics: Magnetar unloads them (60 s, swept every 60 s)
            result["idle"] = {"after_s": args.idle, **snapshot(broker, rss0, args.topics)}
        workers = descendants(broker.pid)
        broker.stop()
        gone(workers)  # a supervisor's workers hold the data directory's lock until they exit
        started = time.monotonic()
        broker.start(START_TIMEOUT_S)
        to_listening = time.monotonic() - started
        # The CPU seconds spent by then (the process tree's: a supervisor's workers too), read when
        # the listening line or port is seen (within 20 ms): the figure that a busy machine's load
        # changes least, where the wall time to listening doubles.
        cpu_at_listening = tree_cpu_seconds(broker.pid)
        to_message = first_message(broker.service_url, args.topics // 2)
        result["restart"] = {
            "to_listening_s": round(to_listening, 3),
            "cpu_s_at_listening": round(cpu_at_listening, 2),
            "first_message_after_listening_s": round(to_message, 3),
            **snapshot(broker, rss0, args.topics),
        }
        return result
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topics", type=int, default=100_000)
    p.add_argument("--clients", type=int, default=4, help="client processes")
    p.add_argument("--threads", type=int, default=8, help="threads in each client process")
    p.add_argument(
        "--idle",
        type=float,
        default=130.0,
        help="seconds nobody uses the topics after the consumer round, then the same figures (0: skip)",
    )
    p.add_argument(
        "--only",
        choices=["magnetar-fsync", "magnetar-workers", PEER],
        help="measure one broker (with --workers, magnetar-fsync then magnetar-workers; "
        "magnetar-workers: that one alone)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="also Magnetar with this many worker processes (magnetar standalone --workers; 0: not)",
    )
    p.add_argument("--magnetar-ref", help="run Magnetar from a snapshot of this git ref")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    names = ["magnetar-fsync"] + ([PEER] if peer_installed() else [])
    if args.only:
        names = [args.only]
    if args.only == "magnetar-workers":
        if not args.workers:
            p.error("--only magnetar-workers needs --workers N")
    elif args.workers:  # --only magnetar-fsync --workers N: Magnetar alone, then with N workers
        names.insert(1, "magnetar-workers")
    # The data directories are removed after the report: 100,000 topics' files take minutes to delete.
    tmp = tempfile.TemporaryDirectory(prefix="magnetar-many-topics-")
    source = MagnetarSource.working_tree()
    if args.magnetar_ref:
        source = MagnetarSource.snapshot(args.magnetar_ref, Path(tmp.name) / "magnetar-src")
    results = [measure(name, Path(tmp.name), args, source) for name in names]
    doc = {
        "benchmark": "many_topics",
        "machine": describe(),
        "topics": args.topics,
        "clients": f"{args.clients} processes x {args.threads} threads, official client",
        "magnetar": source.version(),
        "peer": "measured" if peer_installed() else "pulsar-lite is not installed",
        "results": results,
    }
    emit(doc, args.out)
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
