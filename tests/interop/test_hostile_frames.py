"""Connections that declare large frames and never finish them: the broker's memory stays bounded.

Attackers before CONNECT may send only small frames; connected ones get a large frame's buffer
only within ``max_incomplete_frame_bytes``, and a frame stalled while others wait for room is
dropped with its connection. Meanwhile a canary producer/consumer pair and an honest producer
of several-MiB messages (official client) go on as usual.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time

import pulsar
import pytest
from pulsar.exceptions import Timeout

from magnetar.protocol import encode_frame, wire
from magnetar.protocol.commands import wrap

from ..waiting import eventually
from .support import receive_n, scrape

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: large frames that fill the broker's limits

MIB = 1024 * 1024
DECLARED = 5 * MIB  # each attacker's frame size field
SENT = 700 * 1024  # ... of which it sends this much (more than an eighth), then nothing
BEFORE_CONNECT = 200  # attackers that never CONNECT
CONNECTED = 10  # attackers that CONNECT first
BUDGET = 16 * MIB
RSS_GROWTH_BOUND = 300 * MIB  # the old broker grew by ~5.8 MiB per attacker: 1.2 GB here
#: A canary round trip held up this long fails the canary: a bound on a failure (a healthy broker
#: answers in milliseconds), not a measure of how long one takes.
STALL_FAILS_S = 10.0


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def send_some(sock: socket.socket, data: bytes, seconds: float) -> int:
    """Write what the peer takes within ``seconds`` (a broker that stops reading us takes less)."""
    sock.setblocking(False)
    sent, deadline = 0, time.monotonic() + seconds
    while sent < len(data) and (left := deadline - time.monotonic()) > 0:
        _, writable, _ = select.select([], [sock], [], left)
        if writable:
            try:
                sent += sock.send(data[sent:])
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:  # the broker closed us
                break
    return sent


def attacker(port: int, connect: bool) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if connect:
        sock.sendall(encode_frame(wrap(wire.CommandConnect(client_version="attacker", protocol_version=20))))
    return sock


def declared_frame_start() -> bytes:
    command = wrap(wire.CommandPing()).SerializeToString()
    head = struct.pack(">II", DECLARED - 4, len(command)) + command
    return head + b"\x00" * (SENT - len(head))


class PeakRss:
    """The broker's highest RSS above ``baseline`` while it runs, sampled from a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.baseline = rss_bytes(pid)
        self.growth = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.growth = max(self.growth, rss_bytes(self.pid) - self.baseline)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)


def frame_closes(broker) -> dict[str, float]:
    samples = scrape(broker)
    return {
        labels[0][1]: value
        for (name, labels), value in samples.items()
        if name == "magnetar_frame_closes_total"
    }


class Canary:
    """A producer/consumer pair exchanging small messages one at a time, from a thread."""

    def __init__(self, client: pulsar.Client, topic: str) -> None:
        self.producer = client.create_producer(topic, send_timeout_millis=int(STALL_FAILS_S * 1000))
        self.consumer = client.subscribe(topic, "canary")
        self.sent: list[bytes] = []
        self.received: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            payload = b"canary-%d" % len(self.sent)
            try:
                self.producer.send(payload)
                self.sent.append(payload)
                msg = self.consumer.receive(int(STALL_FAILS_S * 1000))
                self.consumer.acknowledge(msg)
                self.received.append(msg.data())
            except (Timeout, pulsar.PulsarException) as exc:
                self.errors.append(repr(exc))
                return

    def __enter__(self) -> Canary:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_incomplete_large_frames_cannot_exhaust_memory_or_hold_up_other_clients(
    broker_factory, client_factory, topic
):
    broker = broker_factory({"max_incomplete_frame_bytes": BUDGET, "incomplete_frame_timeout_seconds": 1.0})
    pid = broker.proc.pid
    assert pid is not None
    canary_client = client_factory(broker.service_url)
    honest_client = client_factory(broker.service_url)
    honest = honest_client.create_producer(
        f"{topic}-large", send_timeout_millis=60_000, batching_enabled=False
    )
    large_consumer = honest_client.subscribe(f"{topic}-large", "large")
    big = [bytes([n]) * (4 * MIB) for n in range(3)]
    honest.send(big[0])  # warm up the large path before the baseline
    assert receive_n(large_consumer, 1, ack=True)[0].data() == big[0]

    sockets: list[socket.socket] = []
    with Canary(canary_client, f"{topic}-canary") as canary:
        eventually(lambda: len(canary.received) >= 20 or canary.errors, what="20 canary round trips")
        before_attack = len(canary.received)
        data = declared_frame_start()
        with PeakRss(pid) as rss:
            try:
                for n in range(BEFORE_CONNECT + CONNECTED):
                    sock = attacker(broker.port, connect=n >= BEFORE_CONNECT)
                    sockets.append(sock)
                    send_some(sock, data, 0.5)
                # The kernel took the bytes; let the broker read them (the old broker just
                # buffered them, 5 MiB per attacker).
                eventually(
                    lambda: frame_closes(broker).get("too_large_before_connect") == BEFORE_CONNECT,
                    what="every attacker before CONNECT closed",
                )
                # Honest large messages during the attack: they wait for room at most while the
                # stalled frames ahead of them are timed out.
                for payload in big[1:]:
                    honest.send(payload)
                got = receive_n(large_consumer, len(big) - 1, timeout_ms=30_000, ack=True)
                assert [m.data() for m in got] == big[1:]
                # ... and the canary went on meanwhile, not held up until the attackers went
                during = len(canary.received)
                eventually(lambda: len(canary.received) > during or canary.errors, what="a canary round trip")
            finally:
                for sock in sockets:
                    sock.close()

    assert rss.growth < RSS_GROWTH_BOUND, f"broker RSS grew by {rss.growth / MIB:.0f} MiB"
    assert not canary.errors, canary.errors
    assert canary.received == canary.sent and len(canary.sent) > 20
    assert during > before_attack, "no canary round trip while the attackers held their frames open"
    samples = scrape(broker)
    closes = frame_closes(broker)
    assert closes["too_large_before_connect"] == BEFORE_CONNECT
    assert closes["stalled"] >= 1  # the honest producer got room by their going
    assert samples[("magnetar_incomplete_frames_full_total", ())] >= 1
    log = broker.log_text()
    assert "before CONNECT" in log and "stayed incomplete" in log
