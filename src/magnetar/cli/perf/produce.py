"""``magnetar perf produce``: publish at a rate and measure send-to-receipt latency, as pulsar-perf.

Flags are pulsar-perf's where it has them. Every producer takes the next message number from one
shared counter, so ``-r`` and ``-m`` are totals over all producers and topics, and a message is
sent at its due time (``formatting.due_time``): a slow moment is caught up on, not lost. Sends are
pipelined (``--max-outstanding`` in flight per producer, waiting for room when it is full), so one
process reaches tens of thousands of messages a second. The latency of a message is the time from
the send call to the broker's receipt.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from magnetar.cli.connection import Connection, connection_options
from magnetar.cli.formatting import due_time
from magnetar.cli.perf.report import all_topics, produced_line, produced_summary
from magnetar.cli.perf.runner import Run, run_options, run_with_client
from magnetar.client.aio import Client, CompressionType

KEY_MODES = ("autoIncrement", "random")


@dataclass(frozen=True, slots=True)
class ProduceSettings:
    topics: list[str]
    rate: float
    size: int
    num_messages: int
    duration: float
    producers_per_topic: int
    batch_time_ms: float
    batch_max_messages: int
    batch_max_bytes: int
    compression: str
    chunking: bool
    max_outstanding: int
    interval: float
    key_mode: str | None
    quiet: bool

    def producer_options(self) -> dict[str, Any]:
        """``create_producer`` options (the official client's names); batching off with
        ``-b 0`` or with chunking, which cannot be combined with it."""
        batching = self.batch_time_ms > 0 and not self.chunking
        options: dict[str, Any] = {
            "block_if_queue_full": True,
            "max_pending_messages": self.max_outstanding,
            "compression_type": CompressionType[self.compression.upper()],
            "chunking_enabled": self.chunking,
            "batching_enabled": batching,
        }
        if batching:
            options["batching_max_publish_delay_ms"] = max(1, round(self.batch_time_ms))
            options["batching_max_messages"] = self.batch_max_messages
            options["batching_max_allowed_size_in_bytes"] = self.batch_max_bytes
        return options


def payload_of(size: int, rng: random.Random) -> bytes:
    """``size`` random capital letters (as pulsar-perf's payload: compressible as text is)."""
    return bytes(rng.choices(range(ord("A"), ord("Z") + 1), k=size))


def key_function(mode: str | None, rng: random.Random) -> Callable[[int], str | None]:
    """The key of message ``index``: none, its number (``autoIncrement``) or a random number."""
    if mode is None:
        return lambda _index: None
    if mode == "autoIncrement":
        return str
    return lambda _index: str(rng.randrange(2**31))


@click.command("produce")
@click.argument("topics", nargs=-1, required=True)
@click.option(
    "-r",
    "--rate",
    default=100.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Messages a second, over all producers; 0: as fast as the broker takes them.",
)
@click.option(
    "-s", "--size", default=1024, show_default=True, type=click.IntRange(min=0), help="Message size in bytes."
)
@click.option(
    "-n",
    "--num-producers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Producers per topic.",
)
@click.option(
    "-b",
    "--batch-time-window",
    "batch_time_ms",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Batch messages in windows of this many ms; 0: no batching.",
)
@click.option(
    "-bm",
    "--batch-max-messages",
    default=1000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Messages in a batch at most.",
)
@click.option(
    "-bb",
    "--batch-max-bytes",
    default=4 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(min=1),
    help="Bytes in a batch at most.",
)
@click.option(
    "-z",
    "--compression",
    default="NONE",
    show_default=True,
    type=click.Choice([c.name for c in CompressionType], case_sensitive=False),
)
@click.option(
    "-ch", "--chunking", is_flag=True, help="Split messages larger than the broker's limit (no batching)."
)
@click.option(
    "-o",
    "--max-outstanding",
    default=1000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Messages in flight per producer at most.",
)
@click.option(
    "-mk",
    "--message-key-generation-mode",
    "key_mode",
    type=click.Choice(KEY_MODES),
    help="Give each message a key: its number, or a random number.",
)
@run_options("send")
@connection_options
def produce(topics: tuple[str, ...], num_topics: int, connection: Connection, **flags: Any) -> int:
    """Publish to TOPIC... at a rate and print throughput and latency (pulsar-perf produce)."""
    settings = ProduceSettings(
        topics=all_topics(topics, num_topics), producers_per_topic=flags.pop("num_producers"), **flags
    )
    lines, sent, first_failure = run_with_client(connection, lambda client: _produce(client, settings))
    for line in lines:
        click.echo(line)
    if first_failure is not None:
        if sent == 0:
            raise click.ClickException(f"no message was stored; the first failure: {first_failure}")
        click.echo(f"Some messages were not stored; the first failure: {first_failure}", err=True)
    return 0


class _Tickets:
    """Message numbers handed out to the producers in turn: the shared count and pace."""

    def __init__(self, run: Run, rate: float, limit: int) -> None:
        self._run = run
        self._rate = rate
        self._limit = limit
        self._next = itertools.count()

    async def take(self) -> int | None:
        """The next message number once it is due; None when the limit or a stop is reached."""
        index = next(self._next)
        if self._limit and index >= self._limit:
            return None
        if self._rate > 0 and not await self._run.sleep_until(
            self._run.recorder.started + due_time(index, self._rate)
        ):
            return None
        return None if self._run.stop.is_set() else index


async def _produce(client: Client, settings: ProduceSettings) -> tuple[list[str], int, str | None]:
    """The summary's lines, the messages stored, and the first failure (None: there was none)."""
    for topic in settings.topics:  # a lookup first: an unreachable broker fails here, at once
        await client.get_topic_partitions(topic)
    options = settings.producer_options()
    producers = [
        await client.create_producer(topic, **options)
        for topic in settings.topics
        for _ in range(settings.producers_per_topic)
    ]
    rng = random.Random()
    payload = payload_of(settings.size, rng)
    key_of = key_function(settings.key_mode, rng)
    run = Run(settings.interval, settings.duration, produced_line, settings.quiet)
    tickets = _Tickets(run, settings.rate, settings.num_messages)
    outstanding: set[asyncio.Future[Any]] = set()
    failures: list[str] = []

    def settled(sent: float) -> Callable[[asyncio.Future[Any]], None]:
        def done(future: asyncio.Future[Any]) -> None:
            outstanding.discard(future)
            if future.cancelled() or future.exception() is not None:
                run.recorder.failure()
                if not failures:
                    failures.append(repr(future.exception()) if not future.cancelled() else "cancelled")
            else:
                run.recorder.success(len(payload), (time.perf_counter() - sent) * 1e6)

        return done

    async def send_loop(producer: Any) -> None:
        while (index := await tickets.take()) is not None:
            sent = time.perf_counter()
            future = await producer.send_async(payload, partition_key=key_of(index))
            outstanding.add(future)
            future.add_done_callback(settled(sent))

    senders = asyncio.gather(*(send_loop(p) for p in producers))
    await run.until_done(senders)
    await senders
    await asyncio.gather(*(p.flush() for p in producers))
    await asyncio.gather(*list(outstanding), return_exceptions=True)
    total = run.recorder.total(run.now())
    return produced_summary(total), total.messages, failures[0] if failures else None
