"""``magnetar produce``: send messages to a topic, as ``pulsar-client produce``.

Each message (``-m`` text or ``-f`` file) is sent ``-n`` times, all of them once, then all again,
at ``-r`` messages a second (0: as fast as the broker takes them). Sends are pipelined
(``send_async``, blocking when the producer's queue is full) and the command waits for every
receipt before it prints its summary: exit 0 means the broker stored them all.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import click

from magnetar.cli.connection import Connection, connection_options, open_client
from magnetar.cli.formatting import due_time, parse_properties, produce_summary
from magnetar.cli.progress import Progress, live_progress
from magnetar.client import Result


@click.command("produce")
@click.argument("topic")
@click.option("-m", "--messages", "texts", multiple=True, metavar="TEXT", help="A message (repeat for more).")
@click.option(
    "-f",
    "--files",
    "files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file whose bytes are one message (repeat for more).",
)
@click.option(
    "-n",
    "--num-produce",
    "count",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many times to send each message.",
)
@click.option(
    "-r",
    "--rate",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Messages a second; 0: as fast as possible.",
)
@click.option("-k", "--key", default=None, help="The partition key of every message.")
@click.option(
    "-p", "--property", "properties", multiple=True, metavar="KEY=VALUE", help="A property (repeat)."
)
@click.option("--chunking", is_flag=True, help="Split messages larger than the broker's limit into chunks.")
@click.option("-q", "--quiet", is_flag=True, help="No progress line and no summary line.")
@connection_options
def produce(
    topic: str,
    texts: tuple[str, ...],
    files: tuple[Path, ...],
    count: int,
    rate: float,
    key: str | None,
    properties: tuple[str, ...],
    chunking: bool,
    quiet: bool,
    connection: Connection,
) -> int:
    """Send messages to TOPIC (pulsar-client produce)."""
    if bool(texts) == bool(files):
        raise click.UsageError("give the messages with -m TEXT or with -f FILE (one of the two)")
    try:
        props = parse_properties(properties)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="-p/--property") from None
    payloads = [t.encode("utf-8") for t in texts] or [f.read_bytes() for f in files]
    send_options: dict[str, object] = {}
    if props:
        send_options["properties"] = props
    if key is not None:
        send_options["partition_key"] = key
    with open_client(connection) as client:
        producer = client.create_producer(
            topic, chunking_enabled=chunking, batching_enabled=False, block_if_queue_full=True
        )
        with live_progress("produced", quiet=quiet) as progress:
            sent, seconds = _send_all(producer, payloads, count, rate, send_options, progress)
        producer.close()
    if not quiet:
        click.echo(produce_summary(sent, topic, seconds))
    return 0


def _send_all(
    producer, payloads: list[bytes], count: int, rate: float, options: dict, progress: Progress
) -> tuple[int, float]:
    """Send ``count`` rounds of ``payloads`` paced at ``rate``; every receipt waited for (and
    counted on ``progress`` as it comes). Raises ClickException with the first failure the
    broker or client reported."""
    total = count * len(payloads)
    done = threading.Semaphore(0)
    failures: list[str] = []

    def settled(result: Result, _msg_id: object) -> None:
        if result != Result.Ok:
            failures.append(result.name)
        else:
            progress.advance()
        done.release()

    start = time.monotonic()
    index = 0
    for _round in range(count):
        for payload in payloads:
            wait = start + due_time(index, rate) - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            producer.send_async(payload, settled, **options)
            index += 1
    producer.flush()
    for _ in range(total):
        done.acquire()
    if failures:
        raise click.ClickException(
            f"{len(failures)} of {total} messages were not stored; the first failure: {failures[0]}"
        )
    return total, time.monotonic() - start
