"""Benchmark: geo-replication from a Magnetar edge into a centre, Magnetar and pulsar-lite side by side.

For each centre (``magnetar``: a second Magnetar broker; ``pulsar-lite``: the peer, registered as a
cluster with its broker URL and an admin URL nobody serves, as tests/interop/test_replication_peer.py
does) a fresh edge and centre are started; the edge's ``public/default`` replicates to the centre.
The official client produces at the edge and consumes at the centre (subscribed first), and for
each scenario (``100B-batched``: 100 B messages, producer batching; ``10KB``: 10 KB, one per entry):

- **throughput**: ``--messages`` sent as fast as the edge takes them; the replication rate is the
  messages (and MB) over the time from the first send at the edge to the last first receipt at the
  centre (so it includes the edge's own ingest: replication cannot end before it);
- **latency**: ``--latency-messages`` sent at ``--rate`` per second, each stamped with its send time,
  P50/P99/max from the send at the edge to the receipt at the centre (one machine, one clock). At a
  rate the replicator keeps up with, this is what one message waits; the throughput phase's
  latencies (also given) are mostly queueing behind the backlog.

Correctness is counted at the centre: each message must arrive, in order. ``redelivered`` counts
receipts of a message already received (pulsar-lite's dispatch repeats messages to a live consumer:
see the test's docstring; what it stores holds each once), not a failure.

    .venv/bin/python -m bench.replication                             # 50 000 / 5 000 messages
    .venv/bin/python -m bench.replication --scale 0.2 --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pulsar

from bench.brokers import PEER, SPECS, MagnetarSource, make_process, peer_installed, peer_version
from bench.machine import describe
from bench.output import emit
from bench.stats import percentile
from magnetar.broker_process import BrokerProcess

STAMP = struct.Struct(">qi")  # send time (ns), sequence number
NAMESPACE = "public/default"
#: pulsar-lite has no admin API; the ClusterData must still name an HTTP URL.
NO_ADMIN_URL = "http://127.0.0.1:9"


@dataclass(frozen=True)
class Scenario:
    name: str
    size: int
    messages: int  # the throughput phase, before --scale
    batching: bool


SCENARIOS = {
    "100B-batched": Scenario("100B-batched", 100, 50_000, batching=True),
    "10KB": Scenario("10KB", 10 * 1024, 5_000, batching=False),
}
CENTRES = ("magnetar", PEER)


class Receiver:
    """What the centre's consumer received, counted on the client's listener thread."""

    def __init__(self, expected: int) -> None:
        self.lock = threading.Lock()
        self.expected = expected
        self.next_seq = 0
        self.received = 0
        self.redelivered = 0
        self.gaps = 0
        self.latencies_ms: list[float] = []
        self.last_ns = 0
        self.done = threading.Event()

    def on_message(self, consumer, msg) -> None:
        now = time.time_ns()
        sent_ns, seq = STAMP.unpack_from(msg.data())
        with self.lock:
            if seq < self.next_seq:
                self.redelivered += 1
            else:
                if seq > self.next_seq:
                    self.gaps += 1
                self.next_seq = seq + 1
                self.received += 1
                self.latencies_ms.append((now - sent_ns) / 1e6)
                self.last_ns = now
                if self.received >= self.expected:
                    self.done.set()
        consumer.acknowledge(msg)


def admin(http_url: str, method: str, path: str, body: object) -> None:
    """One admin call on the edge; raises on anything but success."""
    request = urllib.request.Request(
        http_url + path,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()


def link(edge: BrokerProcess, centre_data: dict[str, str]) -> None:
    """The edge knows the centre as cluster ``central`` and replicates public/default to it."""
    admin(edge.http_url, "PUT", "/admin/v2/clusters/central", centre_data)
    tenant = {"adminRoles": [], "allowedClusters": ["edge", "central"]}
    admin(edge.http_url, "POST", "/admin/v2/tenants/public", tenant)
    admin(edge.http_url, "POST", f"/admin/v2/namespaces/{NAMESPACE}/replication", ["edge", "central"])


def phase(
    edge_client: pulsar.Client,
    centre_client: pulsar.Client,
    topic: str,
    scenario: Scenario,
    messages: int,
    rate: float | None,
    timeout: float,
) -> dict:
    """Send ``messages`` at the edge (at ``rate``, or as fast as it goes) and count them at the centre."""
    receiver = Receiver(messages)
    consumer = centre_client.subscribe(
        topic, "centre", receiver_queue_size=1000, message_listener=receiver.on_message
    )
    producer = edge_client.create_producer(
        topic,
        batching_enabled=scenario.batching,
        batching_max_messages=1000,
        batching_max_allowed_size_in_bytes=128 * 1024,
        batching_max_publish_delay_ms=10,
        max_pending_messages=10_000 if scenario.batching else 1000,
        block_if_queue_full=True,
    )
    padding = b"x" * max(0, scenario.size - STAMP.size)
    start_ns = time.time_ns()
    start = time.monotonic()
    for seq in range(messages):
        if rate is not None and (wait := start + seq / rate - time.monotonic()) > 0:
            time.sleep(wait)
        producer.send_async(STAMP.pack(time.time_ns(), seq) + padding, None)
    producer.flush()
    produced_s = time.monotonic() - start
    receiver.done.wait(timeout)
    with receiver.lock:
        received, latencies = receiver.received, sorted(receiver.latencies_ms)
        elapsed_s = (receiver.last_ns - start_ns) / 1e9 if received else float("nan")
        counts = {"redelivered": receiver.redelivered, "gaps": receiver.gaps}
    producer.close()
    consumer.close()
    megabytes = received * scenario.size / 1e6
    return {
        "messages": messages,
        "received": received,
        "missing": messages - received,
        **counts,
        "edge_produce_msg_s": round(messages / produced_s, 1),
        "replication_s": round(elapsed_s, 3),
        "replication_msg_s": round(received / elapsed_s, 1) if received else None,
        "replication_mb_s": round(megabytes / elapsed_s, 3) if received else None,
        "latency_ms": {
            "p50": round(percentile(latencies, 0.50), 2),
            "p99": round(percentile(latencies, 0.99), 2),
            "max": round(latencies[-1], 2) if latencies else None,
        },
    }


def run_centre(centre: str, args: argparse.Namespace, source: MagnetarSource, workdir: Path) -> list[dict]:
    """A fresh edge and centre, every scenario's two phases between them."""
    edge_settings = {"cluster_name": "edge", "fsync_policy": args.fsync}
    edge = BrokerProcess(workdir / f"{centre}-edge", edge_settings, env=source.env())
    if centre == PEER:
        target = make_process(SPECS[PEER], workdir / f"{centre}-centre", source)
    else:
        centre_settings = {"cluster_name": "central", "fsync_policy": args.fsync}
        target = BrokerProcess(workdir / f"{centre}-centre", centre_settings, env=source.env())
    clients: list[pulsar.Client] = []
    results = []
    try:
        target.start()
        edge.start()
        http_url = NO_ADMIN_URL if centre == PEER else target.http_url
        link(edge, {"serviceUrl": http_url, "brokerServiceUrl": target.service_url})
        logger = pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(workdir / f"{centre}-client.log"))
        edge_client = pulsar.Client(edge.service_url, operation_timeout_seconds=60, logger=logger)
        centre_client = pulsar.Client(target.service_url, operation_timeout_seconds=60, logger=logger)
        clients = [edge_client, centre_client]
        for name in args.scenarios:
            scenario = SCENARIOS[name]
            stamp = f"{int(time.time() * 1000)}"
            throughput = phase(
                edge_client,
                centre_client,
                f"persistent://{NAMESPACE}/repl-{name}-max-{stamp}",
                scenario,
                max(1, int(scenario.messages * args.scale)),
                None,
                args.timeout,
            )
            latency = phase(
                edge_client,
                centre_client,
                f"persistent://{NAMESPACE}/repl-{name}-rate-{stamp}",
                scenario,
                args.latency_messages,
                args.rate,
                args.timeout,
            )
            result = {"centre": centre, "scenario": name, "throughput": throughput, "at_rate": latency}
            print(json.dumps(result), file=sys.stderr, flush=True)
            results.append(result)
    finally:
        for client in clients:
            with contextlib.suppress(pulsar.PulsarException):
                client.close()
        edge.stop()
        target.stop()
    return results


def failed(result: dict) -> bool:
    return any(result[p]["missing"] or result[p]["gaps"] for p in ("throughput", "at_rate"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replication", description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"from {', '.join(SCENARIOS)}")
    parser.add_argument("--centres", default=",".join(CENTRES), help=f"from {', '.join(CENTRES)}")
    parser.add_argument("--scale", type=float, default=1.0, help="times each scenario's message count")
    parser.add_argument("--latency-messages", type=int, default=1000, help="messages of the latency phase")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second, latency phase")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the centre")
    parser.add_argument("--fsync", choices=["always", "never"], default="always", help="both Magnetars")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    args.scenarios = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    centres = [n.strip() for n in args.centres.split(",") if n.strip()]
    unknown = [n for n in args.scenarios if n not in SCENARIOS] + [n for n in centres if n not in CENTRES]
    if unknown:
        raise SystemExit(f"unknown scenario or centre: {', '.join(unknown)}")
    if PEER in centres and not peer_installed():
        raise SystemExit("pulsar-lite is not installed: pip install -e '.[bench]'")
    source = MagnetarSource.working_tree()
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp:
        for centre in centres:
            print(f"replicating into {centre} ...", file=sys.stderr, flush=True)
            results.extend(run_centre(centre, args, source, Path(tmp)))
    document = {
        "machine": describe(),
        "magnetar": source.version(),
        "pulsar_lite": peer_version() if PEER in centres else None,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "results": results,
    }
    emit(document, args.out)
    bad = [f"{r['centre']}/{r['scenario']}" for r in results if failed(r)]
    if bad:
        print(f"FAILED correctness: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
