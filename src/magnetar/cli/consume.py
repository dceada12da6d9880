"""``magnetar consume`` and ``magnetar read``: print a topic's messages, as ``pulsar-client``'s.

``consume`` subscribes (a durable subscription: what it acknowledges stays acknowledged);
``read`` uses a Reader, which acknowledges nothing and leaves no subscription behind. Both print
one line per message on standard output (text, hex or JSON) and a count on standard error, so the
output can be piped. ``-n 0`` runs until Ctrl-C, which ends the command normally (exit 0).
"""

from __future__ import annotations

from collections.abc import Callable

import click

from magnetar.cli.connection import Connection, connection_options, open_client
from magnetar.cli.formatting import parse_message_id, render
from magnetar.cli.interrupt import stop_on_ctrl_c
from magnetar.cli.progress import live_progress
from magnetar.client import ConsumerType, InitialPosition, Message, MessageId, Timeout

#: How long one receive waits before looking again (so Ctrl-C, seen between receives, ends it promptly).
POLL_MS = 500

SUBSCRIPTION_TYPES = {
    "exclusive": ConsumerType.Exclusive,
    "shared": ConsumerType.Shared,
    "failover": ConsumerType.Failover,
    "key_shared": ConsumerType.KeyShared,
}
#: The ``--subscription-type`` values (any case), as Pulsar's tools spell them.
SUBSCRIPTION_TYPE_CHOICE = click.Choice(
    ["Exclusive", "Shared", "Failover", "Key_Shared"], case_sensitive=False
)


def output_options(command: Callable[..., object]) -> Callable[..., object]:
    """``-n``, ``--hex``, ``--json`` and ``--quiet``, shared by both commands. ``--quiet`` has no
    ``-q``: pulsar-client's consume and read take ``-q`` for the receiver queue size."""
    command = click.option(
        "--quiet", is_flag=True, help="No progress line and no count at the end (standard error)."
    )(command)
    command = click.option(
        "--json",
        "output",
        flag_value="json",
        help="One JSON object a line: id, key, properties, times, payload.",
    )(command)
    command = click.option("--hex", "output", flag_value="hex", help="The payload in hexadecimal.")(command)
    command = click.option(
        "--text", "output", flag_value="text", default=True, hidden=True, help="The payload as UTF-8 text."
    )(command)
    return click.option(
        "-n",
        "--num-messages",
        "count",
        default=1,
        show_default=True,
        type=click.IntRange(min=0),
        help="How many messages; 0: until Ctrl-C.",
    )(command)


@click.command("consume", short_help="Receive and acknowledge messages (pulsar-client consume).")
@click.argument("topic")
@click.option("-s", "--subscription-name", "subscription", required=True, help="The subscription.")
@click.option(
    "-t",
    "--subscription-type",
    "sub_type",
    default="exclusive",
    show_default=True,
    type=SUBSCRIPTION_TYPE_CHOICE,
)
@click.option(
    "--from",
    "--subscription-position",
    "position",
    default="latest",
    show_default=True,
    type=click.Choice(["earliest", "latest"], case_sensitive=False),
    help="Where a new subscription starts.",
)
@output_options
@connection_options
def consume(
    topic: str,
    subscription: str,
    sub_type: str,
    position: str,
    count: int,
    output: str,
    quiet: bool,
    connection: Connection,
) -> int:
    """Receive and acknowledge messages of TOPIC (pulsar-client consume)."""
    initial = InitialPosition.Earliest if position.lower() == "earliest" else InitialPosition.Latest
    with open_client(connection) as client:
        consumer = client.subscribe(
            topic, subscription, consumer_type=SUBSCRIPTION_TYPES[sub_type.lower()], initial_position=initial
        )

        def take() -> Message:
            message = consumer.receive(POLL_MS)
            consumer.acknowledge(message)
            return message

        received = _print_messages(take, count, output, "consumed", quiet)
        consumer.close()
    if not quiet:
        click.echo(f"{received} messages consumed from {topic}", err=True)
    return 0


@click.command("read", short_help="Read messages with a Reader, acknowledging nothing (pulsar-client read).")
@click.argument("topic")
@click.option(
    "-m",
    "--start-message-id",
    "start",
    default="latest",
    show_default=True,
    metavar="earliest|latest|L:E",
    help="Where to start: earliest, latest, or after the message LEDGER:ENTRY[:PARTITION[:BATCH]].",
)
@output_options
@connection_options
def read(topic: str, start: str, count: int, output: str, quiet: bool, connection: Connection) -> int:
    """Read messages of TOPIC with a Reader, acknowledging nothing (pulsar-client read)."""
    try:
        start_id: MessageId = parse_message_id(start)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--start-message-id") from None
    with open_client(connection) as client:
        # A lookup first: it fails at once when the broker cannot be reached (a Reader would
        # retry for the operation timeout), and a partitioned topic is named here, not hung on.
        partitions = client.get_topic_partitions(topic)
        if len(partitions) > 1:
            raise click.ClickException(
                f"{topic} has {len(partitions)} partitions: read one of them ({partitions[0]} ...)"
            )
        reader = client.create_reader(topic, start_id)
        received = _print_messages(lambda: reader.read_next(POLL_MS), count, output, "read", quiet)
        reader.close()
    if not quiet:
        click.echo(f"{received} messages read from {topic}", err=True)
    return 0


def _print_messages(take: Callable[[], Message], count: int, output: str, verb: str, quiet: bool) -> int:
    """Print ``count`` messages (0: until Ctrl-C) as ``take`` returns them, with a live progress
    line on a terminal's standard error; how many were printed."""
    printed = 0
    with live_progress(verb, quiet=quiet) as progress, stop_on_ctrl_c() as stopped:
        try:
            # Ctrl-C is seen here, between messages: one taken (and acknowledged) is printed.
            while (count == 0 or printed < count) and not stopped.is_set():
                try:
                    message = take()
                except Timeout:
                    continue
                click.echo(render(message, output))
                printed += 1
                progress.advance()
        except KeyboardInterrupt:  # a second Ctrl-C, while a receive waits
            pass
    return printed
