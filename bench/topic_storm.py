"""Benchmark: many topics created at once, and what it costs an unrelated producer meanwhile.

Starts a broker process, keeps an official-client canary producer sending one message at a
time (and a canary consumer receiving them) on a topic of its own, then opens ``--topics`` new
topics at once, each with a new durable subscription: ``--connections`` raw connections send
all their SUBSCRIBE commands back to back and wait for every SUCCESS. Prints one JSON object:
how long the storm took, each subscribe's latency (SUBSCRIBE sent to SUCCESS read), and the
canary's send latencies during the storm (the longest is the stall other clients see).

    .venv/bin/python -m bench.topic_storm                  # 2,000 topics over 8 connections
    .venv/bin/python -m bench.topic_storm --topics 500
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import pulsar

from bench.machine import describe
from magnetar.broker_process import BrokerProcess
from magnetar.protocol import FrameDecoder, encode_frame, wire
from magnetar.protocol.commands import wrap


def subscribe_all(port: int, topics: list[str], latencies: list[float]) -> None:
    """One connection: SUBSCRIBE to every topic back to back, then read every SUCCESS."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    decoder = FrameDecoder(64 * 1024 * 1024)

    def read_frame():
        while (frame := decoder.next_frame()) is None:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            decoder.feed(data)
        return frame

    sock.sendall(encode_frame(wrap(wire.CommandConnect(client_version="topic-storm", protocol_version=20))))
    read_frame()
    sent: dict[int, float] = {}
    out = []
    for i, topic in enumerate(topics, start=1):
        sub = wire.CommandSubscribe(
            topic=topic,
            subscription="storm",
            sub_type=wire.CommandSubscribe.Shared,
            consumer_id=i,
            request_id=i,
        )
        out.append(encode_frame(wrap(sub)))
    start = time.monotonic()
    for i in range(1, len(topics) + 1):
        sent[i] = start
    sock.sendall(b"".join(out))
    pending = set(sent)
    while pending:
        frame = read_frame()
        if frame.type == wire.BaseCommand.PING:
            sock.sendall(encode_frame(wrap(wire.CommandPong())))
            continue
        if frame.type != wire.BaseCommand.SUCCESS:
            raise RuntimeError(f"unexpected answer: {frame.command}")
        request_id = frame.body().request_id
        pending.discard(request_id)
        latencies.append(time.monotonic() - sent[request_id])
    sock.close()


class Canary:
    """An official producer sending one message at a time, and a consumer receiving them."""

    def __init__(self, service_url: str, topic: str) -> None:
        logger = logging.getLogger("pulsar-client")
        logger.setLevel(logging.WARNING)
        self.client = pulsar.Client(service_url, operation_timeout_seconds=60, logger=logger)
        self.consumer = self.client.subscribe(topic, "canary")
        self.producer = self.client.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
        self.sends: list[tuple[float, float]] = []  # (start, seconds)
        self.received = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send), threading.Thread(target=self._receive)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _send(self) -> None:
        n = 0
        while not self._stop.is_set():
            begin = time.monotonic()
            self.producer.send(b"canary-%d" % n)
            self.sends.append((begin, time.monotonic() - begin))
            n += 1
            time.sleep(0.002)

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                self.consumer.acknowledge(self.consumer.receive(200))
                self.received += 1
            except pulsar.Timeout:
                continue

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self.client.close()


def run(topics: int, connections: int, workdir: Path) -> dict[str, object]:
    with BrokerProcess(workdir) as broker:
        canary = Canary(broker.service_url, "persistent://public/default/canary")
        canary.start()
        time.sleep(1.0)  # a baseline of canary sends before the storm
        names = [f"persistent://public/default/storm-{i}" for i in range(topics)]
        shares = [names[i::connections] for i in range(connections)]
        latencies: list[float] = []
        threads = [threading.Thread(target=subscribe_all, args=(broker.port, s, latencies)) for s in shares]
        begin = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        storm_s = time.monotonic() - begin
        time.sleep(0.5)
        canary.stop()
    during = [s for t, s in canary.sends if begin <= t <= begin + storm_s]
    latencies.sort()
    return {
        "topics": topics,
        "connections": connections,
        "storm_s": round(storm_s, 3),
        "subscribed": len(latencies),
        "subscribe_p50_s": round(statistics.median(latencies), 3),
        "subscribe_p99_s": round(latencies[int(len(latencies) * 0.99) - 1], 3),
        "subscribe_max_s": round(latencies[-1], 3),
        "canary_sends_during_storm": len(during),
        "canary_send_max_s": round(max(during, default=0.0), 3),
        "canary_send_p50_ms": round(statistics.median(during) * 1000, 2) if during else None,
        "canary_received": canary.received,
        "machine": describe(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topics", type=int, default=2000)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="topic-storm-") as tmp:
        print(json.dumps(run(args.topics, args.connections, Path(tmp)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
