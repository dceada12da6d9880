"""Benchmark: MQTT on Magnetar against Mosquitto (Debian's ``mosquitto``, the usual anchor), side by
side in one run on this machine, with one client for both (``bench/mqtt_client.py``: a lean asyncio
client on Magnetar's codec, MQTT 3.1.1).

Both brokers keep what they take: Magnetar with its default ``fsync_policy = "always"`` (PUBACK only
once the message is fsynced, group-committed), Mosquitto with ``persistence true`` (its in-memory
state is written to ``mosquitto.db`` every ``autosave_interval`` seconds, 1800 by default, and at a
clean shutdown; a PUBACK promises the message is in memory). Each scenario runs on a fresh broker:

- ``qos0``: one publisher sends ``--messages`` messages of ``--size`` bytes at QoS 0 as fast as the
  socket takes them, one subscriber receives them; rate and latency publish -> receipt;
- ``qos1``: the same at QoS 1 with ``--window`` messages in flight: PUBACKs per second, PUBACK latency;
- ``qos1-sync``: QoS 1, one message in flight (``--sync-messages``): the PUBACK round trip;
- ``fanout-N``: N subscribers of one topic (``--fanout``, e.g. 1000,10000; on loopback addresses
  127.0.0.2-201 so that no ephemeral port range runs out), then messages at ``--fanout-deliveries-s``
  / N a second for ``--fanout-seconds``: deliveries per second, P50/P99 publish -> receipt, the
  broker's CPU per delivery, its memory per connection (RSS after the N connected and subscribed,
  less before); for Magnetar also how many consumers the topic's ``mqtt-subscribers`` has at its
  owner (with ``--workers N`` each other worker's subscribers are one there, its follower's link);
- ``kill9``: ``--kill9-messages`` messages published at QoS 1 and acknowledged, the broker killed
  (SIGKILL) and started again: how many it still has. Mosquitto keeps messages for a persistent
  session (a subscriber connected once with clean session off); Magnetar keeps them in the topic (read
  with the Pulsar client) and, where sessions are durable, for the session too.

Prints one JSON document (``--out`` writes it too); docs/benchmarks.md has the figures.

    .venv/bin/python -m bench.mqtt                                 # the figures in benchmarks.md
    .venv/bin/python -m bench.mqtt --smoke                         # a few seconds: is everything there
    .venv/bin/python -m bench.mqtt --brokers magnetar --workers 2 --only fanout --fanout 1000 \
        --magnetar-ref main                                        # MQTT with 2 workers, before/after

With ``--workers N`` Magnetar runs as ``magnetar standalone --workers N`` (the clients' sessions
spread over the workers by client id, docs/mqtt.md: Workers), and its CPU and memory are those of
the supervisor and every worker together.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import getpass
import json
import os
import resource
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.brokers import MagnetarSource
from bench.machine import describe
from bench.mqtt_client import MqttClient, connect, connect_again
from bench.output import emit
from bench.procs import BrokerProcess as PeerProcess
from bench.procs import cpu_split, memory_kib, tree_cpu_split, tree_memory_kib
from bench.stats import latency_summary
from magnetar.broker_process import BrokerProcess
from magnetar.protocol.mqtt import Publish
from magnetar.protocol.mqtt.pulsar_names import pulsar_topic

MOSQUITTO = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin:/usr/local/sbin")
#: Send time (ns) and sequence number at the front of every payload.
STAMP = struct.Struct(">qi")
#: Subscribers connected at once while a fan-out is set up.
CONNECT_BATCH = 100
#: Loopback addresses the fan-out's subscribers connect from (each has its own ephemeral ports).
SOURCES = [f"127.0.0.{i}" for i in range(2, 202)]


@dataclass
class Settings:
    messages: int = 20_000
    size: int = 100
    window: int = 100
    sync_messages: int = 1_000
    fanout: tuple[int, ...] = (1_000, 10_000)
    #: Deliveries a second offered to the fan-out's subscribers (messages a second: this / N) ...
    fanout_deliveries_s: float = 20_000.0
    #: ... for this many seconds.
    fanout_seconds: float = 10.0
    fanout_qos: int = 0
    kill9_messages: int = 1_000
    #: Fresh brokers and every scenario this many times; the report gives medians.
    repeat: int = 3
    #: The scenarios run, by name or prefix ("fanout" for every fan-out); empty: all.
    only: tuple[str, ...] = ()
    #: A scenario ends when nothing new arrived for this long after its last send.
    idle_s: float = 10.0
    #: Magnetar's worker processes (``--workers``); 1: one process.
    workers: int = 1

    @classmethod
    def smoke(cls) -> Settings:
        return cls(300, 100, 50, 30, (20,), 400.0, 1.0, 0, 50, 1, (), 1.5)


# -- the brokers ------------------------------------------------------------------------------------------
class Broker:
    """One broker under test: started fresh, killed and started again, stopped by PID."""

    name = ""
    about = ""

    def __init__(self, work: Path) -> None:
        self.work = work

    @property
    def port(self) -> int:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def kill9(self) -> None:
        raise NotImplementedError

    def restart(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def stored(self, topic: str, count: int) -> int | None:
        """Messages of ``topic`` the broker holds outside any session (None: it keeps none)."""
        return None

    def cpu_split(self) -> tuple[float, float]:
        """User and system CPU seconds of the broker so far."""
        return cpu_split(self.pid)

    def rss_kib(self) -> int:
        return memory_kib(self.pid)["VmRSS"]

    def broadcast_consumers(self, topic: str) -> int | None:
        """Consumers of ``topic``'s MQTT broadcast subscription where it is served (None: no such thing)."""
        return None


class Magnetar(Broker):
    name = "magnetar"
    about = 'Magnetar, fsync_policy = "always" (default): PUBACK after fsync, group commit'

    def __init__(self, work: Path, workers: int = 1, env: dict[str, str] | None = None) -> None:
        super().__init__(work)
        self.workers = workers
        self.process = BrokerProcess(work, self._config(0), env=env)
        if workers > 1:
            self.about = f"{self.about}; --workers {workers}"

    def _config(self, mqtt_port: int) -> dict[str, Any]:
        return {"mqtt_port": mqtt_port, **({"workers": self.workers} if self.workers > 1 else {})}

    def cpu_split(self) -> tuple[float, float]:
        return tree_cpu_split(self.pid) if self.workers > 1 else cpu_split(self.pid)

    def rss_kib(self) -> int:
        return (tree_memory_kib if self.workers > 1 else memory_kib)(self.pid)["VmRSS"]

    def broadcast_consumers(self, topic: str) -> int | None:
        """At the topic's owner (the admin port sends the request there)."""
        name = pulsar_topic(topic, "public", "default")
        local = urllib.parse.quote(name.local_name, safe="")
        url = f"{self.process.http_url}/admin/v2/persistent/public/default/{local}/stats"
        with urllib.request.urlopen(url, timeout=30) as answer:
            stats = json.load(answer)
        subscription = stats["subscriptions"].get("mqtt-subscribers")
        return None if subscription is None else subscription.get("consumersCount")

    @property
    def port(self) -> int:
        assert self.process.mqtt_port is not None
        return self.process.mqtt_port

    @property
    def pid(self) -> int:
        assert self.process.proc is not None
        return self.process.proc.pid

    def start(self) -> None:
        self.process.start()

    def kill9(self) -> None:
        self.process.kill()

    def restart(self) -> None:
        self.process.config = self._config(self.port)  # the same port, as MQTT clients know it
        self.process.restart()

    def stop(self) -> None:
        self.process.stop()

    def stored(self, topic: str, count: int) -> int | None:
        import pulsar

        logger = pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(self.work / "client.log"))
        client = pulsar.Client(self.process.service_url, operation_timeout_seconds=30, logger=logger)
        try:
            name = str(pulsar_topic(topic, "public", "default"))
            reader = client.create_reader(name, pulsar.MessageId.earliest)
            seen = 0
            while seen < count and reader.has_message_available():
                reader.read_next(10_000)
                seen += 1
            return seen
        finally:
            client.close()


class MagnetarAt(Magnetar):
    """Magnetar from a snapshot of a git ref (``--magnetar-ref``): a change and what came before
    it, measured in one run."""

    def __init__(self, work: Path, source: MagnetarSource, name: str, workers: int = 1) -> None:
        super().__init__(work, workers, env=source.env())
        self.name = name
        self.about = f"{self.about}; the code of {source.commit[:10]}"


class Mosquitto(Broker):
    name = "mosquitto"

    def __init__(self, work: Path) -> None:
        super().__init__(work)
        assert MOSQUITTO is not None
        work.mkdir(parents=True, exist_ok=True)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self._port = int(probe.getsockname()[1])
        self.config = work / "mosquitto.conf"
        lines = [
            f"listener {self._port} 127.0.0.1",
            "allow_anonymous true",
            "persistence true",
            f"persistence_location {work}/",
            "max_queued_messages 0",  # no limit on what a persistent session keeps (1000 by default)
            "max_inflight_messages 100",  # as many QoS 1 in flight to a subscriber as our window
        ]
        if os.geteuid() == 0:
            lines.append(f"user {getpass.getuser()}")  # it would drop root for "mosquitto" otherwise
        self.config.write_text("\n".join(lines) + "\n")
        self.about = (
            f"Mosquitto {_mosquitto_version()}, persistence true, autosave_interval 1800 (its default): "
            "PUBACK once in memory, written to disk every 30 min and at a clean stop"
        )
        self.process: PeerProcess | None = None
        self._starts = 0

    @property
    def port(self) -> int:
        return self._port

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> None:
        self._starts += 1
        log = self.work / f"mosquitto-{self._starts}.log"
        cmd = [str(MOSQUITTO), "-c", str(self.config)]
        self.process = PeerProcess("mosquitto", cmd, log, _port_of(self._port)).start()

    def kill9(self) -> None:
        assert self.process is not None and self.process.proc is not None
        self.process.proc.kill()
        self.process.proc.wait(10)

    def restart(self) -> None:
        self.start()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def _port_of(port: int) -> Callable[[PeerProcess], int | None]:
    """Mosquitto listens once a connection to its port is taken (``/proc/net/tcp`` is too long
    to read here, with other test runs' sockets in it)."""

    def find(process: PeerProcess) -> int | None:
        with socket.socket() as probe:
            return port if probe.connect_ex(("127.0.0.1", port)) == 0 else None

    return find


def _mosquitto_version() -> str:
    import subprocess

    text = subprocess.run([str(MOSQUITTO), "-h"], capture_output=True, text=True).stdout
    first = text.splitlines()[0] if text else ""
    return first.rsplit(" ", 1)[-1] if "version" in first else "?"


# -- what is measured -------------------------------------------------------------------------------------
class Inbox:
    """What subscribers received: latency from the stamp, sequence numbers seen, when."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self.latencies_us: list[float] = []
        self.count = 0
        self.seen: set[tuple[int, int]] = set()
        self.duplicates = 0
        self.last_at = time.monotonic()
        self.first_sent_ns = 0

    def handler(self, subscriber: int) -> Callable[[Publish], None]:
        def on_message(packet: Publish) -> None:
            now = time.time_ns()
            sent_ns, seq = STAMP.unpack_from(packet.payload)
            key = (subscriber, seq)
            if key in self.seen:
                self.duplicates += 1
                return
            self.seen.add(key)
            self.count += 1
            self.latencies_us.append((now - sent_ns) / 1000)
            self.last_at = time.monotonic()

        return on_message

    async def until(self, expected: int) -> None:
        while self.count < expected and time.monotonic() - self.last_at < self.idle_s:
            await asyncio.sleep(0.01)


def payload(seq: int, size: int) -> bytes:
    stamp = STAMP.pack(time.time_ns(), seq)
    return stamp + bytes(max(0, size - len(stamp)))


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else 0.0


def _summary(latencies_us: list[float]) -> dict[str, float]:
    return {k: round(v / 1000, 3) for k, v in latency_summary(latencies_us).items() if k != "n"}


async def throughput(
    broker: Broker, settings: Settings, qos: int, window: int, count: int, repeat: int = 0
) -> dict[str, Any]:
    """One publisher and one subscriber of one topic, ``count`` messages at ``qos``."""
    topic = f"bench/qos{qos}/{window}/{repeat}"
    inbox = Inbox(settings.idle_s)
    subscriber = await connect(broker.port, f"sub-{qos}-{window}", on_message=inbox.handler(0))
    await subscriber.subscribe(topic, qos)
    publisher = await connect(broker.port, f"pub-{qos}-{window}")
    acks_us: list[float] = []
    cpu0, client0 = broker.cpu_split(), time.process_time()
    start = time.monotonic()
    if qos == 0:
        for seq in range(count):
            publisher.publish(topic, payload(seq, settings.size))
            if seq % 64 == 63:
                await publisher.drain()
                await asyncio.sleep(0)  # the subscriber's deliveries are read by this loop too
        sent_s = time.monotonic() - start
    else:
        room = asyncio.Semaphore(window)
        for seq in range(count):
            await room.acquire()
            began = time.perf_counter()
            future = publisher.publish(topic, payload(seq, settings.size), 1)
            assert future is not None

            def acked(done: asyncio.Future[Any], began: float = began) -> None:
                if not done.cancelled() and done.exception() is None:
                    acks_us.append((time.perf_counter() - began) * 1e6)
                room.release()

            future.add_done_callback(acked)
        for _ in range(window):
            await room.acquire()
        sent_s = time.monotonic() - start
    await inbox.until(count)
    elapsed = inbox.last_at - start
    user, system = (after - before for after, before in zip(broker.cpu_split(), cpu0, strict=True))
    cpu = user + system
    result: dict[str, Any] = {
        "messages": count,
        "publish_msg_s": _rate(len(acks_us) if qos else count, sent_s),
        "delivered": inbox.count,
        "deliver_msg_s": _rate(inbox.count, elapsed),
        "missing": count - inbox.count,
        "duplicates": inbox.duplicates,
        "latency_ms": _summary(inbox.latencies_us),
        "broker_cpu_us_per_msg": round(cpu / max(1, count) * 1e6, 1),
        "broker_system_cpu_us_per_msg": round(system / max(1, count) * 1e6, 1),
        "client_cpu_s": round(time.process_time() - client0, 2),
    }
    if qos:
        result["window"] = window
        result["puback_ms"] = _summary(acks_us)
        result["acknowledged"] = len(acks_us)
    await publisher.disconnect()
    await subscriber.disconnect()
    return result


async def fanout(broker: Broker, settings: Settings, subscribers: int, repeat: int = 0) -> dict[str, Any]:
    topic = f"bench/fanout/{subscribers}/{repeat}"
    inbox = Inbox(settings.idle_s)
    rss0 = broker.rss_kib()
    started = time.monotonic()
    clients: list[MqttClient] = []

    refusals = 0

    async def one(i: int) -> MqttClient:
        nonlocal refusals
        client, refused = await connect_again(
            broker.port, f"fan-{i}", source=SOURCES[i % len(SOURCES)], on_message=inbox.handler(i)
        )
        refusals += refused
        await client.subscribe(topic, settings.fanout_qos)
        return client

    for first in range(0, subscribers, CONNECT_BATCH):
        batch = range(first, min(subscribers, first + CONNECT_BATCH))
        clients += await asyncio.gather(*(one(i) for i in batch))
    connect_s = time.monotonic() - started
    rss1 = broker.rss_kib()
    at_owner = await asyncio.to_thread(broker.broadcast_consumers, topic)
    publisher = await connect(broker.port, "fan-publisher")
    rate = settings.fanout_deliveries_s / subscribers
    messages = max(1, round(rate * settings.fanout_seconds))
    expected = subscribers * messages
    cpu0, client0 = sum(broker.cpu_split()), time.process_time()
    start = time.monotonic()
    interval = 1.0 / rate
    for seq in range(messages):
        publisher.publish(topic, payload(seq, settings.size))
        next_at = start + (seq + 1) * interval
        while time.monotonic() < next_at:
            await asyncio.sleep(min(0.005, max(0.0, next_at - time.monotonic())))
    inbox.last_at = time.monotonic()
    await inbox.until(expected)
    elapsed = inbox.last_at - start
    cpu = sum(broker.cpu_split()) - cpu0
    result = {
        "subscribers": subscribers,
        "messages": messages,
        "messages_s": round(rate, 2),
        "connect_s": round(connect_s, 2),
        "deliveries": inbox.count,
        "missing": expected - inbox.count,
        "duplicates": inbox.duplicates,
        "deliveries_s": _rate(inbox.count, elapsed),
        "latency_ms": _summary(inbox.latencies_us),
        "broker_cpu_us_per_delivery": round(cpu / max(1, inbox.count) * 1e6, 2),
        "memory_kib_per_connection": round((rss1 - rss0) / subscribers, 2),
        "client_cpu_s": round(time.process_time() - client0, 2),
        "consumers_at_owner": at_owner,
        "connects_refused_and_tried_again": refusals,
    }
    await publisher.disconnect()
    for first in range(0, len(clients), 500):
        await asyncio.gather(*(c.disconnect() for c in clients[first : first + 500]))
    return result


async def kill9(broker: Broker, settings: Settings, repeat: int = 0) -> dict[str, Any]:
    """Acknowledged at QoS 1, then SIGKILL and a restart: what the broker still has."""
    topic = f"bench/kill9/{repeat}"
    keeper = await connect(broker.port, "keeper", clean=False)
    await keeper.subscribe(topic, 1)
    await keeper.disconnect()  # its session keeps the messages published from now on
    publisher = await connect(broker.port, "kill9-publisher")
    acks = []
    for seq in range(settings.kill9_messages):
        future = publisher.publish(topic, payload(seq, settings.size), 1)
        assert future is not None
        acks.append(future)
    answers = await asyncio.gather(*acks, return_exceptions=True)
    acknowledged = sum(1 for answer in answers if not isinstance(answer, BaseException))
    broker.kill9()  # right after the last PUBACK
    broker.restart()
    inbox = Inbox(settings.idle_s)
    again = await connect(broker.port, "keeper", clean=False, on_message=inbox.handler(0))
    await inbox.until(acknowledged)
    await again.disconnect()
    kept = inbox.count
    stored = await asyncio.to_thread(broker.stored, topic, acknowledged)
    return {
        "acknowledged": acknowledged,
        "after_kill9_session": kept,
        "after_kill9_stored": stored,
        "lost": acknowledged - max(kept, stored or 0),
    }


def run_all(makers: dict[str, Callable[[Path], Broker]], settings: Settings, work: Path) -> dict[str, Any]:
    """Each repeat starts a fresh broker of each kind, and runs every scenario on each in turn (the
    order rotating from one repeat to the next), so that both meet the same load from whatever else
    runs on the machine; ``kill9`` last, on fresh brokers too."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in makers}
    about: dict[str, str] = {}
    order = list(makers)
    for repeat in range(settings.repeat):
        brokers = {name: make(work / f"{name}-{repeat}") for name, make in makers.items()}
        for broker in brokers.values():
            broker.start()
            about[broker.name] = broker.about
        try:
            for scenario, run in _scenarios(settings, repeat):
                for name in order:
                    runs[name].setdefault(scenario, []).append(_run(brokers[name], scenario, run))
        finally:
            for broker in brokers.values():
                broker.stop()
        for name in order if _wanted(settings, "kill9") else ():
            crashed = makers[name](work / f"{name}-{repeat}-kill9")
            crashed.start()
            try:
                result = _run(crashed, "kill9", lambda b, r=repeat: kill9(b, settings, r))
                runs[name].setdefault("kill9", []).append(result)
            finally:
                crashed.stop()
        order = order[1:] + order[:1]
    return {"about": about, "runs": runs}


def _wanted(settings: Settings, name: str) -> bool:
    return not settings.only or any(name.startswith(prefix) for prefix in settings.only)


def _scenarios(settings: Settings, repeat: int) -> list[tuple[str, Callable[[Broker], Any]]]:
    every: list[tuple[str, Callable[[Broker], Any]]] = [
        ("qos0", lambda b: throughput(b, settings, 0, 0, settings.messages, repeat)),
        ("qos1", lambda b: throughput(b, settings, 1, settings.window, settings.messages, repeat)),
        ("qos1-sync", lambda b: throughput(b, settings, 1, 1, settings.sync_messages, repeat)),
        *[(f"fanout-{n}", lambda b, n=n: fanout(b, settings, n, repeat)) for n in settings.fanout],
    ]
    return [(name, run) for name, run in every if _wanted(settings, name)]


def _run(broker: Broker, name: str, scenario: Callable[[Broker], Any]) -> dict[str, Any]:
    began = time.monotonic()
    try:
        result: dict[str, Any] = asyncio.run(scenario(broker))
    except Exception as exc:  # one failing scenario is reported, the others still run
        result = {"error": f"{type(exc).__name__}: {exc}"}
    print(f"{broker.name} {name}: {time.monotonic() - began:.1f} s", file=sys.stderr)
    return result


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over the repeats (nested figures too), and the repeats' count."""
    good = [run for run in runs if "error" not in run]
    out: dict[str, Any] = {"repeats": len(good)}
    if len(good) < len(runs):
        out["errors"] = [run["error"] for run in runs if "error" in run]
    for key, value in (good[0] if good else {}).items():
        if isinstance(value, dict):
            out[key] = summarize([run[key] for run in good])
            out[key].pop("repeats", None)
        elif value is None or isinstance(value, int | float):
            values = [run[key] for run in good if run.get(key) is not None]
            out[key] = round(statistics.median(values), 3) if values else None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.mqtt", description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="a few messages and subscribers: checks the harness")
    p.add_argument("--messages", type=int)
    p.add_argument("--size", type=int)
    p.add_argument("--window", type=int)
    p.add_argument("--sync-messages", type=int)
    p.add_argument("--fanout", help="subscriber counts, e.g. 1000,10000")
    p.add_argument("--fanout-deliveries-s", type=float, help="deliveries a second offered (default 20000)")
    p.add_argument("--fanout-seconds", type=float)
    p.add_argument("--fanout-qos", type=int, choices=(0, 1))
    p.add_argument("--idle-s", type=float)
    p.add_argument("--kill9-messages", type=int)
    p.add_argument("--repeat", type=int)
    p.add_argument("--only", help="scenarios by name or prefix, e.g. fanout,kill9 (default: all)")
    p.add_argument("--brokers", default="magnetar,mosquitto")
    p.add_argument("--magnetar-ref", help="also Magnetar from a snapshot of this git ref (before a change)")
    p.add_argument("--workers", type=int, help="Magnetar's worker processes (default 1: one process)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    settings = Settings.smoke() if args.smoke else Settings()
    for name in vars(settings):
        if getattr(args, name, None) is not None:
            setattr(settings, name, getattr(args, name))
    if args.fanout:
        settings.fanout = tuple(int(n) for n in args.fanout.split(","))
    if args.only:
        settings.only = tuple(n.strip() for n in args.only.split(",") if n.strip())
    _raise_descriptor_limit()
    magnetar = functools.partial(Magnetar, workers=settings.workers)
    makers: dict[str, Callable[[Path], Broker]] = {"magnetar": magnetar, "mosquitto": Mosquitto}
    wanted = [n.strip() for n in args.brokers.split(",") if n.strip()]
    skipped = {}
    if "mosquitto" in wanted and MOSQUITTO is None:
        wanted.remove("mosquitto")
        skipped["mosquitto"] = "mosquitto is not installed"
    with tempfile.TemporaryDirectory(prefix="magnetar-mqtt-bench-", dir=os.environ.get("BENCH_TMP")) as tmp:
        if args.magnetar_ref:
            source = MagnetarSource.snapshot(args.magnetar_ref, Path(tmp) / "magnetar-ref")
            label = f"magnetar@{args.magnetar_ref}"
            makers[label] = functools.partial(MagnetarAt, source=source, name=label, workers=settings.workers)
            wanted.insert(1, label)
        done = run_all({name: makers[name] for name in wanted}, settings, Path(tmp))
    results = [
        {
            "name": name,
            "about": done["about"][name],
            "scenarios": {scenario: summarize(runs) for scenario, runs in done["runs"][name].items()},
            "runs": done["runs"][name],
        }
        for name in wanted
    ]
    results += [{"name": name, "skipped": why} for name, why in skipped.items()]
    emit({"machine": describe(), "settings": vars(settings), "results": results}, args.out)
    return 0


def _raise_descriptor_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


if __name__ == "__main__":
    raise SystemExit(main())
