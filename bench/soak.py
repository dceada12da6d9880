"""Benchmark: a long soak of mixed traffic with ``kill -9`` every few minutes and a full disk once.

Issue 34's soak, with the official client. One Magnetar broker (fsync on, deduplication on) on a
filesystem of its own (a loop-mounted ext4 image of ``--disk-mb``, so the disk can really fill:
needs root; ``--no-full-disk`` runs on the work directory instead) serves, for ``--minutes``:

- ``batched``: a batching producer, a Shared subscription of two consumers;
- ``chunked``: messages of 700 KB against a 256 KB ``max_message_size`` (3 chunks each), one
  Exclusive consumer;
- ``keyed``: sixteen keys, a Key_Shared subscription of two consumers;
- ``alerts``: a broadcast subscription of ten consumers, each of which must get every message;
- Spark (``bench/soak_spark.py``, unless ``--no-spark``): a Structured Streaming query copying
  ``batched`` into ``batched-copy`` with deduplication on.

Every few minutes (``--kill-every``, jittered) the broker is killed with SIGKILL and started
again on the same data and ports; once, half way, a filler file takes the disk's last byte for
``--full-disk-s`` seconds, then goes. Then the producers stop and the run waits until everything
is delivered. Every payload carries its sequence number and is checked byte for byte.

It reports, per subscription (each broadcast consumer its own): messages receipted, delivered,
missing (must be 0), delivered again before their acknowledgement (allowed: at least once),
delivered again after it (allowed only for an acknowledgement given within ``ACK_LOSS_WINDOW_S``
before a kill, the cursor-flush window of docs/ack-state.md, or before its consumer was connected
again, which the official client drops; any other is a violation); for
Spark, receipted ``batched`` messages missing from ``batched-copy`` and copies stored twice; the
broker's RSS over each life; kills; sends refused while the disk was full. Exit status 1 on any
loss, damage or violation.

    sudo .venv/bin/python -m bench.soak --minutes 60 --out /tmp/soak.json
    .venv/bin/python -m bench.soak --minutes 2 --no-spark --no-full-disk     # a short look
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import math
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar

from bench.machine import describe
from bench.output import emit
from bench.procs import memory_kib
from magnetar.broker_process import BrokerProcess

#: An acknowledgement this long before a kill -9 may be lost: the cursor flush (1 s), the
#: official client's ack grouping (100 ms) and the way there (docs/ack-state.md).
ACK_LOSS_WINDOW_S = 2.5
BROADCAST = {"magnetar.subscription.type": "Broadcast"}
MAX_MESSAGE_SIZE = 256 * 1024
SEQ = 12  # digits of the sequence number at the head of each payload


@dataclass(frozen=True)
class Flow:
    """One topic's traffic: messages per second, payload size, keys (0: none)."""

    topic: str
    rate: float
    size: int
    keys: int = 0
    batching: bool = False
    chunking: bool = False


FLOWS = (
    Flow("batched", 200, 300, batching=True),
    Flow("chunked", 0.5, 700 * 1024, chunking=True),
    Flow("keyed", 50, 1024, keys=16),
    Flow("alerts", 10, 200),
)


def payload(topic: str, seq: int, size: int) -> bytes:
    """``seq`` as text, then bytes derived from (topic, seq): any damage or mix-up shows."""
    head = f"{seq:0{SEQ}d}".encode()
    block = hashlib.sha256(f"{topic}/{seq}".encode()).digest()
    body = (block * (size // len(block) + 1))[: size - SEQ]
    return head + body


def seq_of(topic: str, data: bytes) -> int | None:
    """The sequence number of an intact payload of ``topic``; None for a damaged one."""
    try:
        seq = int(data[:SEQ])
    except ValueError:
        return None
    return seq if data == payload(topic, seq, len(data)) else None


# -- what happened -----------------------------------------------------------------------------------------


@dataclass
class Ledger:
    """Receipts, deliveries and acknowledgements, and the kills that may excuse a redelivery."""

    receipted: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    failed: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    delivered: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    acked_at: dict[str, dict[int, float]] = field(default_factory=lambda: defaultdict(dict))
    again_before_ack: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    again_after_ack_excused: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    again_after_ack_violations: dict[str, list[tuple[int, float | None]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    #: For each acknowledgement excused: seconds from its kill (negative: before it) and from the
    #: broker's return, to show how wide the window really had to be.
    excused_offsets: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    damaged: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    kills: list[tuple[float, float]] = field(default_factory=list)  # (killed, listening again)
    #: With ``--trace``: every delivery and acknowledgement of each (subscription, seq), to explain
    #: a violation (memory grows with the run: for short runs).
    trace: dict[tuple[str, int], list[tuple[str, float]]] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def receipt(self, topic: str, seq: int, ok: bool) -> None:
        with self.lock:
            if ok:
                self.receipted[topic].add(seq)
            else:
                self.failed[topic] += 1

    def delivery(self, who: str, topic: str, data: bytes) -> int | None:
        seq = seq_of(topic, data)
        with self.lock:
            if seq is None:
                self.damaged[who] += 1
                return None
            seen = self.delivered[who]
            if seq in seen:
                acked = self.acked_at[who].get(seq)
                if acked is None:
                    self.again_before_ack[who] += 1
                elif self.ack_may_be_lost(acked):
                    self.again_after_ack_excused[who] += 1
                    self.excused_offsets[who].append(self.offset_from_kill(acked))
                else:
                    later = [k - acked for k, _ in self.kills if k >= acked]
                    self.again_after_ack_violations[who].append(
                        (seq, round(min(later), 2) if later else None)
                    )
            seen[seq] = seen.get(seq, 0) + 1
            if self.trace is not None:
                self.trace.setdefault((who, seq), []).append(("delivered", time.monotonic()))
        return seq

    def ack_may_be_lost(self, acked: float) -> bool:
        """An ack within the flush window before a kill, or sent before its consumer was connected
        again (the official client drops an ack it cannot send: at least once; 0.5 s for its ack
        grouping and the stats poll)."""
        return any(killed - ACK_LOSS_WINDOW_S <= acked <= back + 0.5 for killed, back in self.kills)

    def offset_from_kill(self, acked: float) -> tuple[float, float]:
        killed, back = min(self.kills, key=lambda kb: abs(kb[0] - acked))
        return round(acked - killed, 2), round(acked - back, 2)

    def ack(self, who: str, seq: int) -> None:
        with self.lock:
            self.acked_at[who][seq] = time.monotonic()
            if self.trace is not None:
                self.trace.setdefault((who, seq), []).append(("acked", time.monotonic()))


def _span(values: list[float]) -> list[float]:
    """[lowest, highest] of the finite ``values`` ([] when none; a redelivery seen before its
    consumers were all back has no distance from that yet)."""
    values = [v for v in values if math.isfinite(v)]
    return [min(values), max(values)] if values else []


# -- the disk ----------------------------------------------------------------------------------------------


class LoopDisk:
    """An ext4 image of ``size_mb`` loop-mounted at ``mountpoint``: a disk that really fills."""

    def __init__(self, image: Path, mountpoint: Path, size_mb: int) -> None:
        self.image, self.mountpoint, self.size_mb = image, mountpoint, size_mb

    def __enter__(self) -> LoopDisk:
        if os.geteuid() != 0:
            raise SystemExit("a loop-mounted disk needs root (or run with --no-full-disk)")
        with open(self.image, "wb") as f:
            f.truncate(self.size_mb * 1024 * 1024)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(self.image)], check=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-o", "loop", str(self.image), str(self.mountpoint)], check=True)
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["umount", str(self.mountpoint)], check=False)
        self.image.unlink(missing_ok=True)

    def fill(self, name: str = "filler") -> int:
        """Zeros into ``name`` until the filesystem has no byte left; the bytes written."""
        written = 0
        block = b"\0" * (1024 * 1024)
        with open(self.mountpoint / name, "wb", buffering=0) as f:
            for size in (len(block), 4096, 1):
                with contextlib.suppress(OSError):
                    while True:
                        written += f.write(block[:size])
            with contextlib.suppress(OSError):
                os.fsync(f.fileno())
        return written


# -- traffic -----------------------------------------------------------------------------------------------


def produce(client: pulsar.Client, flow: Flow, ledger: Ledger, stop: threading.Event) -> None:
    """Send ``flow`` at its rate until ``stop``; each receipt or failure goes to the ledger."""
    producer = client.create_producer(
        flow.topic,
        block_if_queue_full=True,
        batching_enabled=flow.batching,
        batching_max_publish_delay_ms=10,
        chunking_enabled=flow.chunking,
        send_timeout_millis=30_000,
    )
    seq, started = 0, time.monotonic()
    while not stop.is_set():
        due = started + seq / flow.rate
        if (wait := due - time.monotonic()) > 0:
            stop.wait(wait)
            continue

        def done(result, _msg_id, seq=seq) -> None:
            ledger.receipt(flow.topic, seq, result == pulsar.Result.Ok)

        key = f"k{seq % flow.keys}" if flow.keys else None
        kwargs = {"partition_key": key} if key else {}
        producer.send_async(payload(flow.topic, seq, flow.size), done, **kwargs)
        seq += 1
    with contextlib.suppress(Exception):  # a broker away at the very end: the receipts say what was stored
        producer.flush()
    producer.close()


def consume(consumer: pulsar.Consumer, who: str, topic: str, ledger: Ledger, stop: threading.Event) -> None:
    """Receive and acknowledge until ``stop``; every delivery goes to the ledger."""
    while not stop.is_set():
        try:
            msg = consumer.receive(500)
        except pulsar.Timeout:
            continue
        except Exception:  # the broker is away: the client reconnects by itself
            stop.wait(0.2)
            continue
        seq = ledger.delivery(who, topic, msg.data())
        consumer.acknowledge(msg)
        if seq is not None:
            ledger.ack(who, seq)


def subscribe_all(client: pulsar.Client, consumers: int) -> list[tuple[pulsar.Consumer, str, str]]:
    """(consumer, the name its deliveries count under, topic) for every consumer of the soak."""
    shared, exclusive = pulsar.ConsumerType.Shared, pulsar.ConsumerType.Exclusive
    found = []
    for _ in range(2):
        found.append((client.subscribe("batched", "work", consumer_type=shared), "batched/work", "batched"))
        ks = client.subscribe("keyed", "by-key", consumer_type=pulsar.ConsumerType.KeyShared)
        found.append((ks, "keyed/by-key", "keyed"))
    found.append((client.subscribe("chunked", "whole", consumer_type=exclusive), "chunked/whole", "chunked"))
    for i in range(consumers):
        vehicle = client.subscribe(
            "alerts", "fleet", consumer_type=shared, properties=BROADCAST, consumer_name=f"vehicle-{i}"
        )
        found.append((vehicle, f"alerts/fleet/vehicle-{i}", "alerts"))
    return found


# -- the run -----------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def refusals(http_url: str) -> float:
    """``magnetar_send_refusals_total`` summed over its reasons (0 when the broker is away)."""
    try:
        text = urllib.request.urlopen(f"{http_url}/metrics", timeout=5).read().decode()
    except OSError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("magnetar_send_refusals_total")
    )


class Soak:
    """The broker, the clients, the chaos and the figures of one soak."""

    def __init__(self, args: argparse.Namespace, data_root: Path, workdir: Path) -> None:
        self.args = args
        self.ledger = Ledger(trace={} if args.trace else None)
        config = {"max_message_size": MAX_MESSAGE_SIZE, "deduplication_enabled": True}
        self.broker = BrokerProcess(data_root, config)
        self.workdir = workdir
        self.rss: list[dict[str, Any]] = []  # one per life: start, samples
        self.restart_s: list[float] = []
        self.reconnect_s: list[float] = []  # from each kill to every consumer connected again
        self.expected: dict[str, int] = {}  # consumers per topic
        self.full_disk: dict[str, object] = {}
        self.rng = random.Random(args.seed)

    def sample_rss(self, stop: threading.Event) -> None:
        while not stop.wait(10):
            with contextlib.suppress(OSError, AssertionError):
                pid = self.broker.proc.pid if self.broker.proc else None
                if pid and self.broker.running:
                    kib = memory_kib(pid).get("VmRSS", 0)
                    self.rss[-1]["samples"].append((round(time.monotonic() - self.t0), kib))

    def new_life(self) -> None:
        self.rss.append({"started_s": round(time.monotonic() - self.t0), "samples": []})

    def kill_and_restart(self) -> None:
        killed = time.monotonic()
        with self.ledger.lock:  # until every consumer is back, any ack may be lost
            self.ledger.kills.append((killed, math.inf))
        self.broker.kill()
        self.broker.restart()
        listening = time.monotonic()
        self.restart_s.append(round(listening - killed, 2))
        self.new_life()
        reconnected = self.wait_reconnected()
        self.reconnect_s.append(round(reconnected - killed, 2))
        with self.ledger.lock:
            self.ledger.kills[-1] = (killed, reconnected)

    def wait_reconnected(self, timeout: float = 120.0) -> float:
        """When every consumer of the soak is connected again, by the broker's topic stats. The
        official client retries with a doubling backoff, so after a long restart it may come back
        seconds after the broker, and it drops the acks it could not send until then."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.connected(topic) >= n for topic, n in self.expected.items()):
                return time.monotonic()
            time.sleep(0.1)
        return math.inf  # never back: every later ack stays excused, and the drain reports the loss

    def connected(self, topic: str) -> int:
        url = f"{self.broker.http_url}/admin/v2/persistent/public/default/{topic}/stats"
        try:
            stats = json.loads(urllib.request.urlopen(url, timeout=5).read())
        except (OSError, ValueError):
            return 0
        return sum(len(sub.get("consumers", [])) for sub in stats.get("subscriptions", {}).values())

    def fill_disk(self, disk: LoopDisk) -> None:
        before = refusals(self.broker.http_url)
        began = time.monotonic()
        written = disk.fill()
        time.sleep(self.args.full_disk_s)  # the fault's length is the point here
        during = refusals(self.broker.http_url) - before
        (disk.mountpoint / "filler").unlink()
        self.full_disk = {
            "at_s": round(began - self.t0),
            "filler_bytes": written,
            "held_s": self.args.full_disk_s,
            "sends_refused": during,
        }

    def chaos(self, stop: threading.Event, disk: LoopDisk | None) -> None:
        end = self.t0 + self.args.minutes * 60
        full_at = self.t0 + self.args.minutes * 30 if disk is not None else None
        next_kill = time.monotonic() + self.rng.uniform(0.5, 1.5) * self.args.kill_every
        while not stop.is_set():
            now = time.monotonic()
            if now >= end:
                return
            if full_at is not None and now >= full_at:
                assert disk is not None
                self.fill_disk(disk)
                full_at = None
                next_kill = max(next_kill, time.monotonic() + 30)
            elif now >= next_kill:
                self.kill_and_restart()
                next_kill = time.monotonic() + self.rng.uniform(0.5, 1.5) * self.args.kill_every
            stop.wait(1)

    def spark(self) -> subprocess.Popen[str] | None:
        if self.args.no_spark:
            return None
        cmd = [sys.executable, "-m", "bench.soak_spark", self.broker.service_url, self.broker.http_url]
        cmd += ["batched", "batched-copy", str(self.workdir / "checkpoint"), str(self.workdir / "stop-spark")]
        log = open(self.workdir / "spark.log", "w")  # noqa: SIM115 (closed with the process)
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)

    def run(self, disk: LoopDisk | None) -> dict:
        self.t0 = time.monotonic()
        port, http_port = free_port(), free_port()
        self.broker.start(port=port, http_port=http_port)
        self.new_life()
        logger = logging.getLogger("pulsar")
        logger.setLevel(logging.ERROR)
        client = pulsar.Client(self.broker.service_url, operation_timeout_seconds=60, logger=logger)
        stop_traffic, stop_consuming, stop_sampling = threading.Event(), threading.Event(), threading.Event()
        consumers = subscribe_all(client, self.args.broadcast_consumers)
        for _, _, topic in consumers:
            self.expected[topic] = self.expected.get(topic, 0) + 1
        threads = [
            threading.Thread(target=consume, args=(c, who, topic, self.ledger, stop_consuming), daemon=True)
            for c, who, topic in consumers
        ]
        producers = [
            threading.Thread(target=produce, args=(client, flow, self.ledger, stop_traffic), daemon=True)
            for flow in FLOWS
        ]
        sampler = threading.Thread(target=self.sample_rss, args=(stop_sampling,), daemon=True)
        spark = self.spark()
        for t in [*threads, *producers, sampler]:
            t.start()
        try:
            self.chaos(stop_traffic, disk)
            stop_traffic.set()
            for t in producers:
                t.join(120)
            drained = self.wait_drained(consumers, timeout=self.args.drain_s)
            spark_report = self.stop_spark(spark, client)
        finally:
            stop_traffic.set()
            stop_consuming.set()
            stop_sampling.set()
            if spark is not None and spark.poll() is None:
                spark.kill()
            with contextlib.suppress(Exception):
                client.close()
            self.broker.stop()
        return self.report(consumers, drained, spark_report)

    def wait_drained(self, consumers: list[tuple[pulsar.Consumer, str, str]], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        names = {(who, topic) for _, who, topic in consumers}
        while time.monotonic() < deadline:
            with self.ledger.lock:
                if all(self.ledger.receipted[t] <= self.ledger.delivered[w].keys() for w, t in names):
                    return True
            time.sleep(1)
        return False

    def stop_spark(self, spark: subprocess.Popen[str] | None, client: pulsar.Client) -> dict | None:
        if spark is None:
            return None
        want = set(self.ledger.receipted["batched"])
        copies: dict[int, int] = defaultdict(int)
        reader = client.create_reader("batched-copy", pulsar.MessageId.earliest, receiver_queue_size=10_000)
        began = time.monotonic()
        deadline = began + self.args.drain_s
        timeouts = 0
        while time.monotonic() < deadline and not want <= copies.keys():
            try:
                msg = reader.read_next(1000)
            except pulsar.Timeout:
                timeouts += 1
                continue
            seq = seq_of("batched", msg.data())
            if seq is not None:
                copies[seq] += 1
        read_s = time.monotonic() - began
        reader.close()
        (self.workdir / "stop-spark").touch()
        with contextlib.suppress(subprocess.TimeoutExpired):
            spark.wait(120)
        log = (self.workdir / "spark.log").read_text(errors="replace")
        return {
            "missing": len(want - copies.keys()),
            "stored_twice": sum(1 for n in copies.values() if n > 1),
            "copies_read": sum(copies.values()),
            "query_restarts": log.count("restarted:"),
            "read_s": round(read_s, 1),  # reading batched-copy back, from the end of the traffic
            "read_timeouts": timeouts,  # 1 s waits for the next copy (Spark still writing)
        }

    def traces(self) -> dict[str, list[tuple[str, float]]]:
        """Each violation's deliveries, acks and the kills, in seconds from the start (``--trace``)."""
        led = self.ledger
        if led.trace is None:
            return {}
        out = {}
        for who, found in led.again_after_ack_violations.items():
            for seq, _ in found[:5]:
                kills = [("killed", k) for k, _ in led.kills] + [("back", b) for _, b in led.kills]
                events = led.trace.get((who, seq), []) + kills
                out[f"{who}#{seq}"] = [
                    (e, round(t - self.t0, 3)) for e, t in sorted(events, key=lambda e: e[1])
                ]
        return out

    def report(
        self, consumers: list[tuple[pulsar.Consumer, str, str]], drained: bool, spark: dict | None
    ) -> dict:
        led = self.ledger
        subs = {}
        for who, topic in sorted({(w, t) for _, w, t in consumers}):
            want = led.receipted[topic]  # every subscriber of a topic gets all of it
            subs[who] = {
                "receipted": len(want),
                "delivered": len(led.delivered[who]),
                "missing": len(want - led.delivered[who].keys()),
                "damaged": led.damaged[who],
                "again_before_ack": led.again_before_ack[who],
                "again_after_ack_in_window": led.again_after_ack_excused[who],
                "again_after_ack_violations": len(led.again_after_ack_violations[who]),
                "excused_from_kill_s": _span([k for k, _ in led.excused_offsets[who]]),
                "excused_from_back_s": _span([b for _, b in led.excused_offsets[who]]),
                # (seq, seconds from its acknowledgement to the next kill; None: no kill after it)
                "violations": led.again_after_ack_violations[who][:20],
            }
        lives = []
        for life in self.rss:
            kib = [k for _, k in life["samples"]]
            if kib:
                lives.append(
                    {
                        "started_s": life["started_s"],
                        "first_mib": kib[0] // 1024,
                        "peak_mib": max(kib) // 1024,
                        "last_mib": kib[-1] // 1024,
                        "samples": len(kib),
                    }
                )
        failed = (
            not drained
            or any(s["missing"] or s["damaged"] or s["again_after_ack_violations"] for s in subs.values())
            or bool(spark and (spark["missing"] or spark["stored_twice"]))
        )
        return {
            "benchmark": "soak",
            "machine": describe(),
            "settings": {k: v if not isinstance(v, Path) else str(v) for k, v in vars(self.args).items()},
            "minutes": self.args.minutes,
            "kills": len(led.kills),
            "restart_s": self.restart_s,
            "reconnect_s": self.reconnect_s,
            "full_disk": self.full_disk,
            "send_failures": dict(led.failed),
            "drained": drained,
            "subscriptions": subs,
            "spark": spark,
            "broker_rss_per_life": lives,
            "traces": self.traces(),
            "ok": not failed,
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--kill-every", type=float, default=300.0, help="mean seconds between kill -9s")
    p.add_argument("--full-disk-s", type=float, default=30.0)
    p.add_argument("--no-full-disk", action="store_true")
    p.add_argument("--no-spark", action="store_true")
    p.add_argument("--disk-mb", type=int, default=3072)
    p.add_argument("--broadcast-consumers", type=int, default=10)
    p.add_argument("--drain-s", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=34)
    p.add_argument("--trace", action="store_true", help="keep every delivery and ack, to explain violations")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="magnetar-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    disk = None if args.no_full_disk else LoopDisk(workdir / "disk.img", workdir / "disk", args.disk_mb)
    with disk if disk is not None else contextlib.nullcontext():
        data_root = disk.mountpoint / "broker" if disk is not None else workdir / "broker"
        data_root.mkdir(parents=True, exist_ok=True)
        result = Soak(args, data_root, workdir).run(disk)
    emit(result, args.out)
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
