"""``magnetar admin namespaces|topics {set,get,remove}-inactive-topic-policies``: whether topics nobody
uses are deleted, as pulsar-admin's verbs and flags (``-e``/``-d``, ``-t 1h``, ``-m MODE``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from magnetar.cli.admin.policy_commands import Helps, Policy, add_policy_commands
from magnetar.cli.admin.policy_values import DURATION

_MODES = click.Choice(["delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"])


def policies_json(enable: bool | None, max_inactive_duration: int, delete_mode: str) -> dict[str, Any]:
    """Pulsar's InactiveTopicPolicies JSON from pulsar-admin's flags (UsageError without -e or -d)."""
    if enable is None:
        raise click.UsageError("give --enable-delete-while-inactive or --disable-delete-while-inactive")
    if max_inactive_duration <= 0:
        raise click.UsageError("--max-inactive-duration must be positive: 60, 10m, 1h...")
    return {
        "inactiveTopicDeleteMode": delete_mode,
        "maxInactiveDurationSeconds": max_inactive_duration,
        "deleteWhileInactive": enable,
    }


def _policy_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        (
            click.option(
                "-e",
                "--enable-delete-while-inactive",
                "enable",
                flag_value=True,
                default=None,
                help="Delete topics nobody uses.",
            ),
            click.option(
                "-d",
                "--disable-delete-while-inactive",
                "enable",
                flag_value=False,
                help="Do not delete them.",
            ),
            click.option(
                "-t",
                "--max-inactive-duration",
                type=DURATION,
                required=True,
                help="Unused this long, a topic is deleted: seconds, or 10m, 1h, 2d...",
            ),
            click.option(
                "-m",
                "--delete-mode",
                type=_MODES,
                required=True,
                help="Which unused topics may go: with no subscription, or with every one caught up.",
            ),
        )
    ):
        command = option(command)
    return command


add_policy_commands(
    Policy(
        verb="inactive-topic-policies",
        what="the inactive topic policies",
        options=_policy_options,
        value=policies_json,
        namespace=Helps(
            set="Set whether the namespace's unused topics are deleted.",
            get="The namespace's inactive topic policies (\"-\": not set, the broker's settings apply).",
            remove="Unset the namespace's inactive topic policies (the broker's settings apply).",
        ),
        topic=Helps(
            set="Set whether this topic is deleted when nobody uses it (over its namespace's policies).",
            get='The topic\'s inactive topic policies ("-": not set).',
            remove="Remove the topic's own inactive topic policies: its namespace's apply.",
        ),
    )
)
