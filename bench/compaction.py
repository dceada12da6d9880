"""Benchmark: topic compaction (issue 36) on one Magnetar broker, with the official client.

Three measurements in one run, on topics of ``--messages`` messages (default 1,000,000) of
``--payload-size`` bytes over ``--keys`` keys (default 10,000), each message's key drawn at random
(seeded), sent batched:

- **throughput**: topic A filled, then compacted with nothing else running (the admin API's PUT,
  then its status polled every 5 ms until SUCCESS): messages and stored MB (the topic's
  ``storageSize``) per second of compaction. The compacted view is checked: one message per key,
  each key's last.
- **reads**: a reader with ``is_read_compacted=True`` from the earliest message of topic A against a
  plain reader of the same topic, both to the end (``has_message_available``).
- **produce latency**: topic B filled the same way, the broker stopped and its data copied once for
  each run: a broker on the copy, a producer sending one message (sync ``send``, keyed, unbatched)
  every ``1 / --latency-rate`` s to topic B for ``--latency-s`` seconds, then while B's compaction
  runs, then ``--latency-s`` seconds more: each send's latency, by phase. Side by side on the same
  data, ``--latency-rounds`` times each: the broker's default compactor, which yields the GIL every
  ``compaction_yield_interval_ms`` (0.2), and one that never does (``0``), in alternating order.

Prints one JSON object.

    .venv/bin/python -m bench.compaction                          # 1M messages over 10K keys
    .venv/bin/python -m bench.compaction --messages 20000 --keys 200 --latency-s 1
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pulsar

from bench.machine import describe
from bench.output import emit
from magnetar.broker_process import BrokerProcess

NAMESPACE = "persistent://public/default"
POLL_S = 0.005


def _admin(http_url: str, method: str, path: str) -> object:
    request = urllib.request.Request(http_url + path, method=method)
    with urllib.request.urlopen(request, timeout=60) as response:
        text = response.read()
    return json.loads(text) if text.strip() else None


def _topic_path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def payload(seq: int, size: int) -> bytes:
    """The message's sequence number first (what the check reads back), padded to ``size``."""
    return f"{seq:012d}".encode().ljust(size, b"x")


def fill(client: pulsar.Client, topic: str, args: argparse.Namespace, seed: int) -> dict:
    """Send ``args.messages`` keyed messages, batched; the last sequence number of each key."""
    rng = random.Random(seed)
    keys = [f"key-{i:06d}" for i in range(args.keys)]
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=args.batch,
        batching_max_publish_delay_ms=10,
        max_pending_messages=10_000,
        block_if_queue_full=True,
    )
    failures: list[object] = []

    def done(result, _msg_id) -> None:
        if result != pulsar.Result.Ok:
            failures.append(result)

    last: dict[str, int] = {}
    started = time.perf_counter()
    for seq in range(args.messages):
        key = rng.choice(keys)
        producer.send_async(payload(seq, args.payload_size), done, partition_key=key)
        last[key] = seq
    producer.flush()
    seconds = time.perf_counter() - started
    producer.close()
    if failures:
        raise RuntimeError(f"{len(failures)} sends to {topic} failed: {failures[:3]}")
    return {"seconds": seconds, "messages_per_s": args.messages / seconds, "last": last}


def compact(http_url: str, topic: str) -> float:
    """Trigger a compaction of ``topic`` and wait for it; its seconds (to within the 5 ms poll)."""
    path = _topic_path(topic) + "/compaction"
    started = time.perf_counter()
    _admin(http_url, "PUT", path)
    while True:
        status = _admin(http_url, "GET", path)
        assert isinstance(status, dict)
        if status["status"] == "SUCCESS":
            return time.perf_counter() - started
        if status["status"] == "ERROR":
            raise RuntimeError(f"compaction of {topic} failed: {status.get('lastError')}")
        time.sleep(POLL_S)


def read_to_end(client: pulsar.Client, topic: str, compacted: bool) -> tuple[list[pulsar.Message], float]:
    """Every message a reader from the earliest gets, and the seconds it took."""
    started = time.perf_counter()
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted)
    messages = []
    while reader.has_message_available():
        messages.append(reader.read_next(30_000))
    seconds = time.perf_counter() - started
    reader.close()
    return messages, seconds


class LatencyProbe:
    """Sync sends at a fixed rate on a thread of its own; each send's latency under the phase
    current when it started."""

    def __init__(self, client: pulsar.Client, topic: str, rate: float, keys: int) -> None:
        self.producer = client.create_producer(topic, batching_enabled=False)
        self.interval = 1 / rate
        self.keys = keys
        self.phase = "idle_before"
        self.samples: dict[str, list[float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="latency-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        rng = random.Random(3)
        next_at = time.perf_counter()
        seq = 0
        while not self._stop.is_set():
            delay = next_at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            phase = self.phase
            started = time.perf_counter()
            self.producer.send(payload(seq, 100), partition_key=f"key-{rng.randrange(self.keys):06d}")
            self.samples.setdefault(phase, []).append((time.perf_counter() - started) * 1000)
            seq += 1
            # the next send at the next tick of the rate; one that fell behind (a slow send) does
            # not send in a burst to catch up
            next_at = max(next_at + self.interval, time.perf_counter())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.producer.close()


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def at(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return {
        "n": len(ordered),
        "p50": statistics.median(ordered),
        "p99": at(0.99),
        "max": ordered[-1],
    }


def _storage_size(http_url: str, topic: str) -> int:
    stats = _admin(http_url, "GET", _topic_path(topic) + "/stats")
    assert isinstance(stats, dict)
    return int(stats["storageSize"])


def _compacted_bytes(data_dir: Path, local_name: str) -> int:
    """Bytes of the topic's compacted ledger files (log and index) on disk."""
    return sum(
        path.stat().st_size
        for path in data_dir.rglob("compacted/*")
        if path.is_file() and local_name in str(path.parent.parent)
    )


def _check_view(messages: list[pulsar.Message], last: dict[str, int]) -> list[str]:
    """What is wrong with a compacted read: keys missing or extra, or a value not the key's last."""
    got = {m.partition_key(): int(m.data()[:12]) for m in messages}
    problems = [f"{len(messages)} messages for {len(got)} keys"] if len(messages) != len(got) else []
    problems += [f"{k}: {got.get(k)} instead of {v}" for k, v in last.items() if got.get(k) != v][:5]
    problems += [f"{k}: not sent" for k in got.keys() - last.keys()][:5]
    return problems


#: The compactors compared for produce latency: the broker's ``compaction_yield_interval_ms``.
YIELDS = {"yield_0.2ms": 0.2, "no_yield": 0.0}
TOPIC_B = f"{NAMESPACE}/compaction-b"


def _client(broker: BrokerProcess) -> pulsar.Client:
    logger = logging.getLogger("pulsar")
    logger.setLevel(logging.WARNING)
    return pulsar.Client(broker.service_url, operation_timeout_seconds=120, logger=logger)


def latency_run(args: argparse.Namespace, filled: Path, workdir: Path, yield_ms: float) -> dict:
    """A broker on a copy of ``filled`` (topic B stored, never compacted) whose compactor yields
    every ``yield_ms``: the probe's latencies before, during and after B's compaction."""
    shutil.copytree(filled, workdir)
    settings = {"fsync_policy": args.fsync_policy, "compaction_yield_interval_ms": yield_ms}
    broker = BrokerProcess(workdir, settings).start()
    client = _client(broker)
    try:
        probe = LatencyProbe(client, TOPIC_B, args.latency_rate, args.keys)
        probe.start()
        time.sleep(args.latency_s)
        probe.phase = "compacting"
        during_s = compact(broker.http_url, TOPIC_B)
        probe.phase = "idle_after"
        time.sleep(args.latency_s)
        probe.stop()
    finally:
        client.close()
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "compaction_seconds": during_s,
        **{phase: percentiles(probe.samples.get(phase, [])) for phase in PHASES},
    }


def run(args: argparse.Namespace, workdir: Path) -> dict:
    broker = BrokerProcess(workdir / "broker", {"fsync_policy": args.fsync_policy}).start()
    client = _client(broker)
    try:
        topic_a = f"{NAMESPACE}/compaction-a"
        filled = fill(client, topic_a, args, seed=1)
        stored = _storage_size(broker.http_url, topic_a)
        seconds = compact(broker.http_url, topic_a)
        compacted_read, compacted_s = read_to_end(client, topic_a, compacted=True)
        problems = _check_view(compacted_read, filled["last"])
        full_read, full_s = read_to_end(client, topic_a, compacted=False)
        if len(full_read) != args.messages:
            problems.append(f"a full read got {len(full_read)} of {args.messages} messages")
        fill(client, TOPIC_B, args, seed=2)
    finally:
        client.close()
        broker.stop()
    latency: dict[str, list[dict]] = {name: [] for name in YIELDS}
    for round_ in range(args.latency_rounds):
        order = list(YIELDS) if round_ % 2 == 0 else list(reversed(YIELDS))
        for name in order:
            run_dir = workdir / f"latency-{name}-{round_}"
            latency[name].append(latency_run(args, workdir / "broker", run_dir, YIELDS[name]))
    return {
        "benchmark": "compaction",
        "machine": describe(),
        "broker": f"Magnetar, fsync_policy = {args.fsync_policy}",
        "messages": args.messages,
        "keys": args.keys,
        "payload_size": args.payload_size,
        "batch": args.batch,
        "fill": {"seconds": filled["seconds"], "messages_per_s": filled["messages_per_s"]},
        "compaction": {
            "seconds": seconds,
            "messages_per_s": args.messages / seconds,
            "stored_bytes": stored,
            "mb_per_s": stored / seconds / 1e6,
            "kept_messages": len(compacted_read),
            "compacted_ledger_bytes": _compacted_bytes(broker.data_dir, "compaction-a"),
        },
        "reads": {
            "compacted": {"messages": len(compacted_read), "seconds": compacted_s},
            "full": {"messages": len(full_read), "seconds": full_s},
            "full_over_compacted": full_s / compacted_s,
        },
        "produce_latency_ms": {"rate_per_s": args.latency_rate, **latency},
        "problems": problems,
    }


PHASES = ("idle_before", "compacting", "idle_after")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--payload-size", type=int, default=100, help="bytes of each message (at least 12)")
    p.add_argument("--batch", type=int, default=100, help="most messages per batch when filling")
    p.add_argument("--fsync-policy", choices=("always", "never"), default="always", help="the broker's")
    p.add_argument("--latency-rate", type=float, default=200.0, help="probe sends per second")
    p.add_argument("--latency-s", type=float, default=5.0, help="seconds of probing before and after")
    p.add_argument("--latency-rounds", type=int, default=2, help="latency runs of each compactor")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    if args.payload_size < 12:
        p.error("--payload-size must be at least 12 (the sequence number)")
    with tempfile.TemporaryDirectory(prefix="magnetar-compaction-") as tmp:
        doc = run(args, Path(tmp))
    emit(doc, args.out)
    return 1 if doc["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
