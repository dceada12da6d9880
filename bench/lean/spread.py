"""A broker with workers for a lean run: the topic made spread before the consumers come (one
broadcast consumer at the owner, then every worker's LOOKUP naming the shared port), and where
the consumers' connections went (docs/architecture.md, the spread).
"""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

import pulsar

from bench.procs import BrokerProcess, descendants
from magnetar.protocol import FrameDecoder, encode_frame, wire
from magnetar.protocol.commands import wrap

BROADCAST = {"magnetar.subscription.type": "Broadcast"}
SERVING = re.compile(r"(worker-\d+) \(pid (\d+)\) serving on pulsar://[^:\s]+:(\d+)")


def worker_ports(broker: BrokerProcess) -> dict[str, tuple[int, int]]:
    """Each live worker's (pid, own pulsar:// port), by name, from the broker's log."""
    return {name: (int(pid), int(port)) for name, pid, port in SERVING.findall(broker.log_tail(1_000_000))}


def lookup_answer(port: int, topic: str) -> int:
    """The LOOKUP answer type (``CommandLookupTopicResponse.LookupType``) of the worker on ``port``."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        decoder = FrameDecoder(1 << 20)
        sock.sendall(
            encode_frame(wrap(wire.CommandConnect(client_version="bench-spread", protocol_version=20)))
        )
        sock.sendall(encode_frame(wrap(wire.CommandLookupTopic(topic=topic, request_id=1))))
        while True:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError(f"port {port} closed the connection")
            decoder.feed(data)
            for frame in decoder.frames():
                if frame.type == wire.BaseCommand.LOOKUP_RESPONSE:
                    return frame.command.lookup_response.response


def make_spread(client: pulsar.Client, broker: BrokerProcess, topic: str, timeout: float = 30.0) -> None:
    """A broadcast consumer at the topic's owner (its client looks the topic up: the owner) makes the
    topic spread; once every worker answers its LOOKUP with the shared port, it leaves."""
    starter = client.subscribe(
        topic,
        "vehicles",
        consumer_type=pulsar.ConsumerType.Exclusive,
        consumer_name="spread-starter",
        properties=BROADCAST,
    )
    deadline = time.monotonic() + timeout
    redirect = wire.CommandLookupTopicResponse.Redirect
    ports = [port for _, port in worker_ports(broker).values()]
    while not all(lookup_answer(port, topic) == redirect for port in ports):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the workers did not all answer {topic}'s LOOKUP with the shared port")
        time.sleep(0.05)
    starter.close()  # closed by its client: its place goes at once, it holds nothing


def sockets_per_process(broker: BrokerProcess) -> dict[str, int]:
    """Open sockets of each broker process (a worker's: about its connections), by worker name."""
    names = {pid: name for name, (pid, _) in worker_ports(broker).items()}
    out = {}
    for pid in descendants(broker.pid):
        fds = Path(f"/proc/{pid}/fd")
        try:
            count = sum(1 for fd in fds.iterdir() if _is_socket(fd))
        except OSError:
            continue
        out[names.get(pid, str(pid))] = count
    return out


def _is_socket(fd: Path) -> bool:
    try:
        return os.readlink(fd).startswith("socket:")
    except OSError:
        return False
