"""Benchmark: tiered storage, the filesystem driver and an S3 protocol server (moto) side by side.

For each driver, a broker process (``fsync_policy = "never"``, no entry cache, small ledgers) gets
``--messages`` messages of ``--size`` bytes from the official client on a topic that stays local
and on ``--repeats`` topics that are offloaded:

- **offload**: each offloaded topic's closed ledgers offloaded by the admin API (``PUT .../offload``),
  timed from the call to ``SUCCESS`` (upload and verification: the object is read back whole), in
  MB/s of objects written; the local copies are deleted (``offloadDeletionLag`` 0).

Then ``--repeats`` rounds, the two brokers in turn, each round after a restart of the broker
(nothing in its memory; the OS's page cache holds the local files and the filesystem store alike):

- **local read**: a reader from the earliest message reads the local topic from its files;
- **cold read**: the same on an offloaded topic, every closed ledger read from its object (ranges,
  through the read-ahead cache, which starts empty);
- **warm read**: that topic again (what the read-ahead cache kept).

Each read gives its messages/s, MB/s and the first message's latency (from creating the reader);
each figure is the median, low and high of the repeats. Prints one JSON object. The S3 server is
moto's, a Python process on the same cores: its figures are a floor for the broker's side of S3,
not a measure of a real store.

    .venv/bin/python -m bench.offload                       # 20,000 messages of 1 KiB per driver
    .venv/bin/python -m bench.offload --messages 2000 --out /tmp/offload.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pulsar

from bench.machine import describe
from bench.output import emit
from bench.s3_server import BUCKET, S3Server
from magnetar.broker_process import BrokerProcess

DRIVERS = ("filesystem", "s3")
MB = 1_000_000


def _http(broker: BrokerProcess, method: str, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        broker.http_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        text = response.read()
    return json.loads(text) if text.strip() else None


def _topic_path(topic: str, suffix: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/") + suffix


def config_for(driver: str, workdir: Path, s3: S3Server | None, ledger_bytes: int) -> dict[str, object]:
    config: dict[str, object] = {
        "fsync_policy": "never",
        "entry_cache_bytes": 0,
        "max_ledger_size_bytes": ledger_bytes,
        "managed_ledger_offload_deletion_lag_ms": 0,
        "managed_ledger_offload_check_interval_seconds": 0.2,
    }
    if driver == "filesystem":
        return {
            **config,
            "managed_ledger_offload_driver": "filesystem",
            "file_system_uri": str(workdir / "store"),
        }
    assert s3 is not None
    credentials = workdir / "credentials"
    credentials.write_text("access_key_id=bench\nsecret_access_key=bench\n")
    return {
        **config,
        "managed_ledger_offload_driver": "aws-s3",
        "managed_ledger_offload_bucket": BUCKET,
        "managed_ledger_offload_region": "us-east-1",
        "managed_ledger_offload_service_endpoint": s3.endpoint,
        "managed_ledger_offload_credentials_file": str(credentials),
    }


def produce(client: pulsar.Client, topic: str, messages: int, size: int) -> None:
    producer = client.create_producer(
        topic, batching_enabled=False, max_pending_messages=2000, block_if_queue_full=True
    )
    failures: list[object] = []
    payload = b"x" * size
    for _ in range(messages):
        producer.send_async(
            payload, lambda result, _id: failures.append(result) if result != pulsar.Result.Ok else None
        )
    producer.flush()
    producer.close()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed: {failures[0]}")


def read_all(client: pulsar.Client, topic: str, messages: int, size: int) -> dict[str, float]:
    """A reader from the earliest message reads every one: first-message latency, rates."""
    started = time.perf_counter()
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        reader.read_next(60_000)
        first = time.perf_counter() - started
        for _ in range(messages - 1):
            reader.read_next(60_000)
        seconds = time.perf_counter() - started
    finally:
        reader.close()
    return {
        "first_message_ms": round(first * 1000, 1),
        "seconds": round(seconds, 3),
        "msg_s": round(messages / seconds),
        "mb_s": round(messages * size / seconds / MB, 1),
    }


def offload_everything(broker: BrokerProcess, topic: str) -> dict[str, float]:
    """Offload every closed ledger by the admin API and wait for SUCCESS; the objects' MB/s."""
    stats = _http(broker, "GET", _topic_path(topic, "/internalStats"))
    assert isinstance(stats, dict)
    closed = stats["ledgers"][:-1]
    object_bytes = sum(ledger["size"] + 8 * ledger["entries"] for ledger in closed)
    started = time.perf_counter()
    _http(
        broker,
        "PUT",
        _topic_path(topic, "/offload"),
        {"ledgerId": stats["ledgers"][-1]["ledgerId"], "entryId": 0},
    )
    while True:
        status = _http(broker, "GET", _topic_path(topic, "/offload"))
        assert isinstance(status, dict)
        if status["status"] == "SUCCESS":
            break
        if status["status"] == "ERROR":
            raise RuntimeError(f"the offload failed: {status['lastError']}")
        time.sleep(0.01)
    seconds = time.perf_counter() - started
    while True:  # the local copies go (deletion lag 0): the reads after this are from the objects
        ledgers = _http(broker, "GET", _topic_path(topic, "/internalStats"))["ledgers"][:-1]  # type: ignore[index]
        if all(not ledger["local"] for ledger in ledgers):
            break
        time.sleep(0.05)
    return {
        "ledgers": len(closed),
        "object_mb": round(object_bytes / MB, 2),
        "seconds": round(seconds, 3),
        "mb_s": round(object_bytes / seconds / MB, 1),
    }


class Side:
    """One driver's broker and topics: ``local`` is never offloaded, ``offloaded`` are."""

    def __init__(self, driver: str, workdir: Path, s3: S3Server | None, args: argparse.Namespace) -> None:
        work = workdir / driver
        work.mkdir(parents=True)
        self.driver = driver
        self.broker = BrokerProcess(work, config_for(driver, work, s3, args.ledger_bytes))
        name = f"persistent://public/default/offload-bench-{uuid.uuid4().hex[:8]}"
        self.local = f"{name}-local"
        self.offloaded = [f"{name}-offloaded-{n}" for n in range(args.repeats)]
        self.figures: dict[str, list[dict[str, float]]] = {
            "offload": [],
            "local_read": [],
            "cold_read": [],
            "warm_read": [],
        }

    def client(self) -> pulsar.Client:
        logger = logging.getLogger("pulsar")
        logger.setLevel(logging.WARNING)
        return pulsar.Client(self.broker.service_url, operation_timeout_seconds=60, logger=logger)

    def prepare(self, args: argparse.Namespace) -> None:
        """Start, write every topic, offload the ``offloaded`` ones one by one (each timed)."""
        self.broker.start()
        client = self.client()
        try:
            for topic in [self.local, *self.offloaded]:
                produce(client, topic, args.messages, args.size)
        finally:
            client.close()
        for topic in self.offloaded:
            self.figures["offload"].append(offload_everything(self.broker, topic))

    def read_round(self, n: int, args: argparse.Namespace) -> None:
        """After a restart: the local topic, then an offloaded one cold, then again warm."""
        self.broker.stop()
        self.broker.restart()
        client = self.client()
        try:
            offloaded = self.offloaded[n % len(self.offloaded)]
            self.figures["local_read"].append(read_all(client, self.local, args.messages, args.size))
            self.figures["cold_read"].append(read_all(client, offloaded, args.messages, args.size))
            self.figures["warm_read"].append(read_all(client, offloaded, args.messages, args.size))
        finally:
            client.close()

    def report(self) -> dict[str, object]:
        out: dict[str, object] = {"driver": self.driver}
        for name, runs in self.figures.items():
            out[name] = {key: _spread([run[key] for run in runs]) for key in runs[0]}
        return out


def _spread(values: list[float]) -> dict[str, float]:
    """Median, low and high of the repeats (the VM is shared: the spread is part of the figure)."""
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=20_000, help="messages per topic")
    p.add_argument("--size", type=int, default=1024, help="bytes per message")
    p.add_argument("--ledger-bytes", type=int, default=4 * 1024 * 1024, help="max_ledger_size_bytes")
    p.add_argument("--repeats", type=int, default=3, help="offloads and read rounds per driver")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="magnetar-offload-bench-") as tmp:
        workdir = Path(tmp)
        s3 = S3Server(workdir)
        sides = [Side(driver, workdir, s3 if driver == "s3" else None, args) for driver in DRIVERS]
        try:
            s3.create_bucket()
            for side in sides:
                side.prepare(args)
            for n in range(args.repeats):  # the drivers in turn, the first one alternating
                for side in sides if n % 2 == 0 else reversed(sides):
                    side.read_round(n, args)
        finally:
            for side in sides:
                side.broker.stop()
            s3.stop()
    results = [side.report() for side in sides]
    doc = {
        "benchmark": "offload",
        "machine": describe(),
        "messages": args.messages,
        "size": args.size,
        "ledger_bytes": args.ledger_bytes,
        "repeats": args.repeats,
        "results": results,
        "cold_vs_local_msg_s": {
            side.driver: round(
                statistics.median(
                    cold["msg_s"] / local["msg_s"]
                    for cold, local in zip(side.figures["cold_read"], side.figures["local_read"], strict=True)
                ),
                2,
            )
            for side in sides
        },
    }
    emit(doc, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
