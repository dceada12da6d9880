"""Benchmark: how long the broker's loop stalls for the requests that walk every topic, with N
topics loaded (issue 40).

A Magnetar broker process (``fsync_policy = "never"`` so that making the topics is quick, and
``broker_unload_inactive_topics_seconds = 0`` so that they all stay loaded) gets ``--topics``
topics through the admin API's PUT; then each request below is made while a canary asks the same
HTTP port for ``/admin/v2/brokers/health`` every 5 ms. The loop's stall during a request is the
longest canary round trip that began while the request ran (the loop serves the canary between
the slices of a request that is cut in slices, and not at all during one that is not). Measured:

- ``GET /metrics`` (topic-level series, the default), its size;
- ``GET /admin/v2/broker-stats/topics`` (Pulsar's, new with issue 40: absent before);
- ``GET /admin/v2/persistent/public/default`` (the admin topic list);
- ``GET_TOPICS_OF_NAMESPACE`` by our client, without and with a regex (``topics_pattern``).

With ``--magnetar-ref REF`` a broker from a snapshot of REF is measured first, then the working
tree, each on its own fresh broker, in one run. Prints one JSON object.

    .venv/bin/python -m bench.topic_scale_stalls --topics 100000 --magnetar-ref main
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.brokers import MAGNETAR, BrokerSpec, MagnetarSource, make_process
from bench.machine import describe
from bench.output import emit
from bench.procs import BrokerProcess, memory_kib
from magnetar.broker_process import parse_listening

SPEC = BrokerSpec(
    "magnetar-scale",
    MAGNETAR,
    {"fsync_policy": "never", "broker_unload_inactive_topics_seconds": 0},
    "Magnetar, fsync_policy = never, topics never unloaded",
)
START_TIMEOUT_S = 600.0
CANARY_INTERVAL_S = 0.005
NAMESPACE = "public/default"


def topic_name(i: int) -> str:
    return f"device-{i:06d}"


def http_port(broker: BrokerProcess) -> int:
    listening = parse_listening(broker.log_tail(100_000))
    assert listening is not None and listening.http_port is not None, "no HTTP port in the log"
    return listening.http_port


def create_topics(port: int, count: int, threads: int) -> float:
    """PUT each topic (a topic created is loaded); the seconds it took."""
    local = threading.local()

    def put(i: int) -> None:
        if not hasattr(local, "http"):
            local.http = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        local.http.request("PUT", f"/admin/v2/persistent/{NAMESPACE}/{topic_name(i)}")
        answer = local.http.getresponse()
        answer.read()
        if answer.status >= 300:
            raise RuntimeError(f"PUT {topic_name(i)}: {answer.status}")

    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, range(count)))
    return time.monotonic() - started


class Canary(threading.Thread):
    """``GET /admin/v2/brokers/health`` every ``CANARY_INTERVAL_S``: (start, round trip) of each."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.trips: list[tuple[float, float]] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        while not self._stop_event.is_set():
            started = time.monotonic()
            connection.request("GET", "/admin/v2/brokers/health")
            connection.getresponse().read()
            self.trips.append((started, time.monotonic() - started))
            self._stop_event.wait(CANARY_INTERVAL_S)
        connection.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def during(self, begin: float, end: float) -> list[float]:
        return [trip for started, trip in self.trips if begin <= started <= end]


def get(port: int, path: str) -> tuple[int, int]:
    """(status, bytes) of one GET."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, len(answer.read())
    finally:
        connection.close()


def topics_of_namespace(service_url: str, pattern: str | None) -> tuple[int, int]:
    """(1, topics listed) of one GET_TOPICS_OF_NAMESPACE by our client."""
    from magnetar.client.aio import Client
    from magnetar.protocol import pulsar_wire_pb2 as wire

    async def ask() -> int:
        client = Client(service_url)
        try:
            answer = await client.get_topics_of_namespace(
                NAMESPACE, wire.CommandGetTopicsOfNamespace.PERSISTENT, topics_pattern=pattern
            )
            return len(answer.topics)
        finally:
            await client.close()

    return 1, asyncio.run(ask())


def measure_request(canary: Canary, request: Callable[[], tuple[int, int]]) -> dict[str, object]:
    begin = time.monotonic()
    status, size = request()
    end = time.monotonic()
    trips = canary.during(begin, end)
    return {
        "status": status,
        "size": size,
        "seconds": round(end - begin, 3),
        "loop_stall_max_s": round(max(trips, default=0.0), 3),
        "canary_trips": len(trips),
    }


def measure(source: MagnetarSource, workdir: Path, args: argparse.Namespace) -> dict[str, object]:
    broker = make_process(SPEC, workdir, source)
    broker.start(START_TIMEOUT_S)
    try:
        port = http_port(broker)
        result: dict[str, object] = {"magnetar": source.version()}
        result["create_s"] = round(create_topics(port, args.topics, args.threads), 1)
        result["rss_mib"] = round(memory_kib(broker.pid)["VmRSS"] / 1024, 1)
        canary = Canary(port)
        canary.start()
        time.sleep(2.0)  # a baseline of round trips while nothing else runs
        idle = [trip for _, trip in canary.trips]
        result["canary_idle_p50_ms"] = round(statistics.median(idle) * 1000, 2)
        result["canary_idle_max_s"] = round(max(idle), 3)
        url = broker.service_url
        requests: dict[str, Callable[[], tuple[int, int]]] = {
            "metrics": lambda: get(port, "/metrics"),
            "broker_stats_topics": lambda: get(port, "/admin/v2/broker-stats/topics"),
            "admin_topic_list": lambda: get(port, f"/admin/v2/persistent/{NAMESPACE}"),
            "topics_of_namespace": lambda: topics_of_namespace(url, None),
            "topics_of_namespace_pattern": lambda: topics_of_namespace(
                url, f"persistent://{NAMESPACE}/device-00000.*"
            ),
        }
        for name, request in requests.items():
            result[name] = measure_request(canary, request)
        canary.stop()
        return result
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topics", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=8, help="threads making the topics")
    p.add_argument("--magnetar-ref", help="measure a snapshot of this git ref first (before)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="magnetar-scale-") as tmp:
        sources = [MagnetarSource.working_tree()]
        if args.magnetar_ref:
            sources.insert(0, MagnetarSource.snapshot(args.magnetar_ref, Path(tmp) / "src-before"))
        results = [measure(source, Path(tmp) / f"broker-{i}", args) for i, source in enumerate(sources)]
        emit(
            {
                "benchmark": "topic_scale_stalls",
                "machine": describe(),
                "topics": args.topics,
                "broker": SPEC.about,
                "results": results,
            },
            args.out,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
