"""Benchmark: Pulsar's WebSocket API and REST produce against the official client, on one broker,
side by side in one run.

One Magnetar broker process (a fresh data directory). Each repeat runs, on fresh topics, in turn:

- ``official-produce``: the official client sends ``--messages`` messages of ``--size`` bytes
  asynchronously, unbatched (one entry per message, as the WebSocket producer stores them), up to
  ``--window`` awaiting their receipts;
- ``ws-produce``: one WebSocket producer (the ``websockets`` library, asyncio) sends as many, up
  to ``--window`` unanswered (Pulsar's ``maxPendingMessages``), each answered once on disk; with
  ``--ws-batch N`` also ``ws-produce-batched`` (``batchingEnabled``, N messages an entry) against
  ``official-produce-batched``;
- ``official-consume`` / ``ws-consume``: a consumer of each kind drains what its producer wrote
  (``receiverQueueSize`` 1000, every message acknowledged one by one);
- ``rest-produce``: REST produce requests of ``--rest-batch`` messages each, ``--rest-concurrency``
  at a time, until ``--messages`` are stored.

Each phase's figure is messages per second from its first send to its last answer (or receive),
and the broker's CPU microseconds per message (``/proc``: user + system over the phase). The
client runs in this process (the official client's threads, and one asyncio loop for the
WebSocket and HTTP clients): on a small machine it competes with the broker for the cores, so the
broker's CPU per message is the figure that compares the paths. Prints one JSON object: the
machine, the settings, each run, and the medians with the WebSocket / official ratios.

    .venv/bin/python -m bench.websocket                            # 20,000 messages, 3 repeats
    .venv/bin/python -m bench.websocket --messages 2000 --repeat 1 --ws-batch 100
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pulsar
from websockets.asyncio.client import connect

from bench.machine import describe
from bench.procs import cpu_seconds
from magnetar.broker_process import BrokerProcess

RECEIVER_QUEUE = 1000
#: A consumer that hears nothing for this long is stuck (the phase fails rather than hangs).
IDLE_S = 30.0


def _quiet() -> logging.Logger:
    logger = logging.getLogger("bench.websocket.client")
    logger.setLevel(logging.WARNING)
    return logger


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Phase:
    """A phase's messages, wall time and the broker's and client's CPU."""

    def __init__(self, name: str, broker_pid: int) -> None:
        self.name = name
        self._pid = broker_pid
        self.count = 0

    def __enter__(self) -> Phase:
        self._cpu = cpu_seconds(self._pid)
        self._client = _client_cpu()
        self._start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.monotonic() - self._start
        self.broker_cpu_s = cpu_seconds(self._pid) - self._cpu
        self.client_cpu_s = _client_cpu() - self._client

    def figures(self, expected: int) -> dict[str, Any]:
        per = max(self.count, 1)
        return {
            "phase": self.name,
            "messages": self.count,
            "expected": expected,
            "seconds": round(self.seconds, 3),
            "msg_s": round(self.count / self.seconds) if self.seconds else 0,
            "broker_cpu_us_per_msg": round(self.broker_cpu_s / per * 1e6, 1),
            "client_cpu_us_per_msg": round(self.client_cpu_s / per * 1e6, 1),
        }


# -- the official client --------------------------------------------------------------------------


def official_produce(client: pulsar.Client, topic: str, args, phase: Phase, batch: int = 0) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=batch > 0,
        batching_max_messages=max(batch, 2),
        batching_max_publish_delay_ms=10,
        max_pending_messages=args.window,
        block_if_queue_full=True,
    )
    payload = b"x" * args.size
    stored = [0]

    def receipt(result, _msg_id) -> None:
        if result == pulsar.Result.Ok:
            stored[0] += 1

    with phase:
        for _ in range(args.messages):
            producer.send_async(payload, receipt)
        producer.flush()
    phase.count = stored[0]
    producer.close()


def official_consume(client: pulsar.Client, topic: str, args, phase: Phase) -> None:
    consumer = client.subscribe(topic, "bench", receiver_queue_size=RECEIVER_QUEUE)
    with phase:
        for _ in range(args.messages):
            consumer.acknowledge(consumer.receive(int(IDLE_S * 1000)))
            phase.count += 1
    consumer.close()


# -- the WebSocket API and REST produce ---------------------------------------------------------------


def _ws_path(broker: BrokerProcess, kind: str, topic: str, *tail: str) -> str:
    rest = topic.replace("persistent://", "persistent/", 1)
    base = broker.http_url.replace("http://", "ws://", 1)
    return "/".join([f"{base}/ws/v2/{kind}", rest, *tail])


async def ws_produce(broker: BrokerProcess, topic: str, args, phase: Phase, batch: int = 0) -> None:
    query = f"?maxPendingMessages={args.window}"
    if batch:
        query += f"&batchingEnabled=true&batchingMaxMessages={batch}&batchingMaxPublishDelay=10"
    frame = json.dumps({"payload": base64.b64encode(b"x" * args.size).decode()})
    url = _ws_path(broker, "producer", topic) + query
    async with connect(url, max_size=None, compression=_compression(args)) as ws:
        room = asyncio.Semaphore(args.window)

        async def answers() -> None:
            for _ in range(args.messages):
                answer = json.loads(await asyncio.wait_for(ws.recv(), IDLE_S))
                if answer.get("result") == "ok":
                    phase.count += 1
                room.release()

        with phase:
            reader = asyncio.ensure_future(answers())
            for _ in range(args.messages):
                await room.acquire()
                await ws.send(frame)
            await reader


def _compression(args) -> str | None:
    """``permessage-deflate`` offered (as browsers and the websockets library do), or not."""
    return None if args.ws_compression == "none" else "deflate"


async def ws_consume(broker: BrokerProcess, topic: str, args, phase: Phase) -> None:
    url = _ws_path(broker, "consumer", topic, "bench") + f"?receiverQueueSize={RECEIVER_QUEUE}"
    async with connect(url, max_size=None, compression=_compression(args)) as ws:
        with phase:
            for _ in range(args.messages):
                message = json.loads(await asyncio.wait_for(ws.recv(), IDLE_S))
                await ws.send(json.dumps({"messageId": message["messageId"]}))
                phase.count += 1


async def rest_produce(broker: BrokerProcess, topic: str, args, phase: Phase) -> None:
    url = f"{broker.http_url}/topics/{topic.replace('persistent://', 'persistent/', 1)}"
    payload = "x" * args.size
    per_request = max(1, args.rest_batch)
    requests = -(-args.messages // per_request)
    body = json.dumps({"messages": [{"payload": payload}] * per_request})
    headers = {"Content-Type": "application/json"}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for number in range(requests):
        queue.put_nowait(number)

    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            while not queue.empty():
                queue.get_nowait()
                async with session.post(url, data=body, headers=headers) as answer:
                    answered = await answer.json()
                    if answer.status != 200:
                        raise RuntimeError(f"REST produce answered {answer.status}: {answered}")
                    results = answered["messagePublishResults"]
                phase.count += sum(1 for r in results if r.get("errorCode") == 0)

        with phase:
            await asyncio.gather(*(worker() for _ in range(args.rest_concurrency)))
    phase.expected_override = requests * per_request  # type: ignore[attr-defined]


# -- the run ----------------------------------------------------------------------------------------------


def one_repeat(broker: BrokerProcess, client: pulsar.Client, args) -> list[dict[str, Any]]:
    pid = broker.proc.pid if broker.proc is not None else 0
    results = []

    def topic(kind: str) -> str:
        return f"persistent://public/default/bench-{kind}-{uuid.uuid4().hex[:8]}"

    def run(name: str, action: Callable[[Phase], Awaitable[None] | None]) -> None:
        phase = Phase(name, pid)
        outcome = action(phase)
        if asyncio.iscoroutine(outcome):
            asyncio.run(outcome)
        expected = getattr(phase, "expected_override", args.messages)
        results.append(phase.figures(expected))

    official_topic, ws_topic = topic("official"), topic("ws")
    for name in (official_topic, ws_topic):  # the subscriptions the consumers drain, made first
        client.subscribe(name, "bench").close()
    run("official-produce", lambda p: official_produce(client, official_topic, args, p))
    run("ws-produce", lambda p: ws_produce(broker, ws_topic, args, p))
    run("official-consume", lambda p: official_consume(client, official_topic, args, p))
    run("ws-consume", lambda p: ws_consume(broker, ws_topic, args, p))
    if args.ws_batch:
        batched_official, batched_ws = topic("official-batched"), topic("ws-batched")
        run(
            "official-produce-batched",
            lambda p: official_produce(client, batched_official, args, p, args.ws_batch),
        )
        run("ws-produce-batched", lambda p: ws_produce(broker, batched_ws, args, p, args.ws_batch))
    run("rest-produce", lambda p: rest_produce(broker, topic("rest"), args, p))
    return results


PAIRS = (
    ("ws-produce", "official-produce"),
    ("ws-consume", "official-consume"),
    ("ws-produce-batched", "official-produce-batched"),
    ("rest-produce", "official-produce"),
)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    medians: dict[str, Any] = {}
    for name in dict.fromkeys(r["phase"] for r in runs):
        mine = [r for r in runs if r["phase"] == name]
        medians[name] = {
            key: statistics.median(r[key] for r in mine) for key in ("msg_s", "broker_cpu_us_per_msg")
        }
    ratios = {}
    for ours, theirs in PAIRS:
        if ours in medians and theirs in medians:
            ratios[f"{ours} / {theirs}"] = {
                "msg_s": round(medians[ours]["msg_s"] / max(medians[theirs]["msg_s"], 1), 2),
                "broker_cpu_per_msg": round(
                    medians[ours]["broker_cpu_us_per_msg"]
                    / max(medians[theirs]["broker_cpu_us_per_msg"], 0.1),
                    2,
                ),
            }
    return {"median": medians, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.websocket", description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=20_000, help="messages each phase sends or drains")
    p.add_argument("--size", type=int, default=100, help="payload bytes")
    p.add_argument("--window", type=int, default=1000, help="sends awaiting their answer at most")
    p.add_argument("--ws-batch", type=int, default=0, help="also batched producers, N messages an entry")
    p.add_argument(
        "--ws-compression",
        choices=("deflate", "none"),
        default="deflate",
        help="permessage-deflate offered by the WebSocket client (deflate: as browsers do)",
    )
    p.add_argument("--rest-batch", type=int, default=100, help="messages per REST request")
    p.add_argument("--rest-concurrency", type=int, default=4, help="REST requests at once")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-ws-") as tmp:
        broker = BrokerProcess(Path(tmp)).start()
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=60, logger=_quiet())
        try:
            for repeat in range(args.repeat):
                for result in one_repeat(broker, client, args):
                    runs.append({"repeat": repeat, **result})
        finally:
            client.close()
            broker.stop()
    failed = [r for r in runs if r["messages"] != r["expected"]]
    doc = {
        "machine": describe(),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        **summarize(runs),
        "runs": runs,
        "failed": failed,
    }
    text = json.dumps(doc, indent=1, default=str)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
