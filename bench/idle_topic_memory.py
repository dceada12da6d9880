"""What an idle topic leaves in the broker's memory (issue 40): tracemalloc snapshots and object
counts diffed before and after N topics are created and unloaded.

A broker runs in this process (``Standalone``, the settings of ``magnetar standalone`` but the
ports, and its collector tuned as the command tunes it); the official client, in client
processes, gives each of ``--topics`` new topics one message through a producer that then closes
(``bench.many_topics``' produce round). Then every loaded topic is unloaded as the inactive-topic
sweep does, and their closes awaited. Snapshots: after a warm-up round (``--warmup`` topics
created and unloaded, so one-time allocations are out of the way), with the N topics loaded, and
after their unload (the collector still off, as it mostly is in the broker), then after a
``gc.collect()`` (and ``malloc_trim(0)`` with ``--trim``). Printed per state: RSS, glibc's heap
(``mallinfo2``), pymalloc's arenas and blocks, what tracemalloc traces; the object counts by type
that an unload left (in reference cycles: none, since issue 40); the allocation sites that grew
most per topic while loaded, and what was allocated since the warm-up and is still alive.

    .venv/bin/python -m bench.idle_topic_memory --topics 2000
    .venv/bin/python -m bench.idle_topic_memory --topics 4000 --no-trace --trim   # RSS as it is
    PYTHONMALLOC=malloc .venv/bin/python -m bench.idle_topic_memory --topics 4000 --no-trace --trim
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import multiprocessing
import os
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

from bench.many_topics import client_share
from bench.output import emit
from bench.procs import memory_kib
from magnetar.broker.config import BrokerConfig
from magnetar.cli.standalone import Standalone, tune_gc

#: Objects of these modules are the client's or the benchmark's, not what the broker keeps.
_NOT_BROKER = ("tracemalloc", "bench/")


def produce(url: str, first: int, count: int, clients: int, threads: int) -> list[str]:
    """Topics ``first`` .. ``first + count - 1`` each given one message (client processes)."""
    indexes = list(range(first, first + count))
    shares = [indexes[k::clients] for k in range(clients)]
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        results = pool.starmap(client_share, [("produce", url, s, threads) for s in shares])
    return [e for r in results for e in r]


async def unload_all(standalone: Standalone) -> int:
    """Unload every loaded topic as the inactive sweep does; wait for their storage to close."""
    service = standalone.broker
    topics = list(service.topics.values())
    for topic in topics:
        service.loader.unload(topic)
    service.catalog.topics_changed()
    closer = service.loader.closer
    await asyncio.get_running_loop().run_in_executor(None, lambda: closer.submit(lambda: None).result())
    while service.loader._closing:
        await asyncio.sleep(0.05)
    return len(topics)


def type_counts() -> Counter[str]:
    return Counter(type(o).__qualname__ for o in gc.get_objects())


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def heaps() -> dict[str, float]:
    """glibc's heap (``mallinfo2``: in use, free inside it, mmapped blocks) and pymalloc's arenas
    (``sys._debugmallocstats``' totals), MiB."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    out = {
        "malloc_in_use_mib": round(info.uordblks / 2**20, 1),
        "malloc_free_mib": round(info.fordblks / 2**20, 1),
        "malloc_mmapped_mib": round(info.hblkhd / 2**20, 1),
    }
    with tempfile.TemporaryFile("w+") as text:  # written to the C stderr
        saved = os.dup(2)
        os.dup2(text.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        text.seek(0)
        lines = text.read().splitlines()
    for line in lines:
        value = line.split("=")[-1].replace(",", "").strip()
        if "bytes/arena" in line:
            out["pymalloc_arenas_mib"] = round(int(value) / 2**20, 1)
        elif line.startswith("# bytes in allocated blocks"):
            out["pymalloc_blocks_mib"] = round(int(value) / 2**20, 1)
    return out


def state(label: str, pid_rss: int) -> dict[str, object]:
    current, _ = tracemalloc.get_traced_memory()
    traced = {"traced_mib": round(current / 2**20, 1)} if tracemalloc.is_tracing() else {}
    return {"at": label, "rss_mib": round(pid_rss / 1024, 1), **traced, **heaps()}


def diff(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, topics: int, top: int) -> list[str]:
    """The allocation sites that grew, bytes per topic, largest first."""
    filters = [tracemalloc.Filter(False, f"*{m}*") for m in _NOT_BROKER]
    stats = after.filter_traces(filters).compare_to(before.filter_traces(filters), "lineno")
    lines = []
    for stat in stats[:top]:
        if stat.size_diff <= 0:
            break
        frame = stat.traceback[0]
        where = f"{Path(frame.filename).name}:{frame.lineno}"
        lines.append(
            f"{stat.size_diff / topics:8.1f} B/topic {stat.count_diff / topics:6.2f} blocks/topic {where}"
        )
    return lines


def grown_types(before: Counter[str], after: Counter[str], topics: int, top: int) -> list[str]:
    grown = Counter({k: after[k] - before.get(k, 0) for k in after})
    return [f"{n / topics:7.2f}/topic {name}" for name, n in grown.most_common(top) if n > 0]


def _site(stat: tracemalloc.Statistic) -> str:
    frame = stat.traceback[0]
    return f"{stat.count:6d} blocks {stat.size:8d} B {Path(frame.filename).name}:{frame.lineno}"


async def measure(args: argparse.Namespace, data_dir: Path) -> dict[str, object]:
    config = BrokerConfig.load(
        None, data_dir=data_dir, port=0, http_port=0, broker_unload_inactive_topics_seconds=0
    )
    standalone = Standalone(config)
    await standalone.start()
    tune_gc()
    pid, url = os.getpid(), standalone.broker.service_url
    assert url is not None
    states: list[dict[str, object]] = []
    out: dict[str, object] = {"topics": args.topics, "warmup": args.warmup, "states": states}
    run = asyncio.get_running_loop().run_in_executor
    try:
        await run(None, produce, url, 0, args.warmup, args.clients, args.threads)
        await unload_all(standalone)
        if args.trace:
            tracemalloc.start(args.frames)
        states.append(state("warmed up", memory_kib(pid)["VmRSS"]))
        counts = type_counts()
        snapshot = tracemalloc.take_snapshot() if args.trace else None
        started = time.monotonic()
        errors = await run(None, produce, url, args.warmup, args.topics, args.clients, args.threads)
        out["produce_s"] = round(time.monotonic() - started, 1)
        out["errors"] = errors[:3]
        states.append(state("loaded", memory_kib(pid)["VmRSS"]))
        if snapshot is not None:
            out["loaded_sites"] = diff(snapshot, tracemalloc.take_snapshot(), args.topics, args.top)
        await unload_all(standalone)
        states.append(state("unloaded", memory_kib(pid)["VmRSS"]))
        # What the unloaded topics left that reference counting did not free (cycles), by type.
        out["left_by_type"] = grown_types(counts, type_counts(), args.topics, args.top)
        if snapshot is not None:
            after = tracemalloc.take_snapshot()
            out["left_sites"] = diff(snapshot, after, args.topics, args.top)
            out["allocated_since_warm_up_and_alive"] = [
                _site(s) for s in after.statistics("lineno")[: args.top]
            ]
        gc.collect()
        states.append(state("unloaded, gc.collect()", memory_kib(pid)["VmRSS"]))
        if args.trim:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            states.append(state("malloc_trim(0)", memory_kib(pid)["VmRSS"]))
    finally:
        tracemalloc.stop()
        await standalone.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topics", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--frames", type=int, default=1, help="traceback depth tracemalloc keeps")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--collect", action="store_true", help="gc.collect() after the warm-up")
    p.add_argument("--no-trace", dest="trace", action="store_false", help="RSS only (no tracemalloc)")
    p.add_argument("--trim", action="store_true", help="malloc_trim(0) at the end, RSS after")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="magnetar-idle-memory-") as tmp:
        result = asyncio.run(measure(args, Path(tmp) / "data"))
    emit({"benchmark": "idle_topic_memory", **result}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
