"""``magnetar perf consume``: receive and acknowledge as fast as messages come, and measure the
end-to-end latency (the message's publish time to its receipt), as pulsar-perf consume.

``-n`` consumers per subscription and topic, each receiving on its own task and acknowledging
every message (individually, without waiting: acknowledgements are grouped on the wire). The
end-to-end latency compares this machine's clock with the producer's, so it means something when
both run on one machine or on synchronised clocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import click

from magnetar.cli.connection import Connection, connection_options
from magnetar.cli.consume import SUBSCRIPTION_TYPE_CHOICE, SUBSCRIPTION_TYPES
from magnetar.cli.perf.report import all_topics, received_line, received_summary
from magnetar.cli.perf.runner import Run, run_options, run_with_client
from magnetar.client.aio import Client, InitialPosition


@dataclass(frozen=True, slots=True)
class ConsumeSettings:
    topics: list[str]
    subscriptions: tuple[str, ...]
    subscription_type: str
    position: str
    consumers_per_subscription: int
    receiver_queue_size: int
    num_messages: int
    duration: float
    interval: float
    quiet: bool

    def consumer_options(self) -> dict[str, Any]:
        """``subscribe`` options (the official client's names)."""
        earliest = self.position.lower() == "earliest"
        return {
            "consumer_type": SUBSCRIPTION_TYPES[self.subscription_type.lower()],
            "initial_position": InitialPosition.Earliest if earliest else InitialPosition.Latest,
            "receiver_queue_size": self.receiver_queue_size,
        }


@click.command("consume")
@click.argument("topics", nargs=-1, required=True)
@click.option(
    "-ss",
    "-s",
    "--subscriptions",
    "subscriptions",
    multiple=True,
    default=("sub",),
    show_default=True,
    help="A subscription to consume on (repeat for more).",
)
@click.option(
    "-st",
    "--subscription-type",
    default="Exclusive",
    show_default=True,
    type=SUBSCRIPTION_TYPE_CHOICE,
)
@click.option(
    "-sp",
    "--subscription-position",
    "position",
    default="Latest",
    show_default=True,
    type=click.Choice(["Earliest", "Latest"], case_sensitive=False),
    help="Where a new subscription starts.",
)
@click.option(
    "-n",
    "--num-consumers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Consumers per subscription and topic.",
)
@click.option(
    "-q",
    "--receiver-queue-size",
    default=1000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Messages each consumer may have queued.",
)
@run_options("receive")
@connection_options
def consume(topics: tuple[str, ...], num_topics: int, connection: Connection, **flags: Any) -> int:
    """Receive from TOPIC... and print throughput and end-to-end latency (pulsar-perf consume)."""
    settings = ConsumeSettings(
        topics=all_topics(topics, num_topics),
        consumers_per_subscription=flags.pop("num_consumers"),
        **flags,
    )
    for line in run_with_client(connection, lambda client: _consume(client, settings)):
        click.echo(line)
    return 0


async def _consume(client: Client, settings: ConsumeSettings) -> list[str]:
    for topic in settings.topics:  # a lookup first: an unreachable broker fails here, at once
        await client.get_topic_partitions(topic)
    options = settings.consumer_options()
    consumers = [
        await client.subscribe(topic, subscription, **options)
        for topic in settings.topics
        for subscription in settings.subscriptions
        for _ in range(settings.consumers_per_subscription)
    ]
    run = Run(settings.interval, settings.duration, received_line, settings.quiet)
    recorder = run.recorder
    limit = settings.num_messages

    async def receive_loop(consumer: Any) -> None:
        while not run.stop.is_set():
            message = await consumer.receive()
            latency_ms = time.time() * 1000 - message.publish_timestamp()
            recorder.success(len(message.data()), latency_ms * 1000)
            await consumer.acknowledge(message)
            if limit and recorder.messages >= limit:
                run.stop.set()

    receivers = asyncio.gather(*(receive_loop(c) for c in consumers))
    await run.until_done(receivers)
    if receivers.done():
        receivers.result()  # a consumer failed
    receivers.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await receivers
    for consumer in consumers:
        await consumer.close()  # sends the grouped acknowledgements
    return received_summary(recorder.total(run.now()))
