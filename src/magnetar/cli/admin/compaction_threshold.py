"""``magnetar admin namespaces|topics {set,get,remove}-compaction-threshold``: bytes not compacted yet
past which a topic is compacted by itself, as pulsar-admin's verbs and flags (``-t 10M``; a topic's
``get`` takes ``--applied``/``-ap``)."""

from __future__ import annotations

import click

from magnetar.cli.admin.policy_commands import Helps, Policy, add_policy_commands
from magnetar.cli.admin.policy_values import SIZE

_THRESHOLD = click.option(
    "-t",
    "--threshold",
    type=SIZE,
    required=True,
    help="Bytes of backlog not compacted yet before compaction starts by itself: 10M, 16G, 3T...;"
    " 0 turns it off.",
)

add_policy_commands(
    Policy(
        verb="compaction-threshold",
        what="the compaction threshold",
        options=_THRESHOLD,
        value=lambda threshold: threshold,
        told=lambda threshold: f" to {threshold} bytes",
        namespace=Helps(
            set="Compact the namespace's topics by themselves past a backlog not compacted yet.",
            get="The namespace's compaction threshold in bytes (\"not set\": the broker's setting applies).",
            remove="Unset the namespace's compaction threshold (the broker's setting applies).",
        ),
        topic=Helps(
            set="Compact this topic by itself past a backlog not compacted yet (over its namespace's).",
            get="The topic's compaction threshold in bytes (\"not set\": its namespace's or the broker's"
            " applies).",
            remove="Unset the topic's compaction threshold (its namespace's or the broker's applies).",
        ),
    )
)
