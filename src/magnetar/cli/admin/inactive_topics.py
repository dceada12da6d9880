"""``magnetar admin namespaces|topics {set,get,remove}-inactive-topic-policies``: whether topics nobody
uses are deleted, as pulsar-admin's verbs and flags (``-e``/``-d``, ``-t 1h``, ``-m MODE``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from magnetar.cli.admin.common import done, json_option, pass_admin, print_value
from magnetar.cli.admin.namespaces import namespaces
from magnetar.cli.admin.policy_values import DURATION
from magnetar.cli.admin.topics import topic_argument, topics
from magnetar.client.admin import AdminClient

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


@namespaces.command("set-inactive-topic-policies")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@_policy_options
@pass_admin
def set_namespace(admin: AdminClient, namespace: str, enable, max_inactive_duration: int, delete_mode: str):
    """Set whether the namespace's unused topics are deleted."""
    admin.namespaces.set_inactive_topic_policies(
        namespace, policies_json(enable, max_inactive_duration, delete_mode)
    )
    done(f"Set the inactive topic policies of {namespace}")


@namespaces.command("get-inactive-topic-policies")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@json_option
@pass_admin
def get_namespace(admin: AdminClient, namespace: str, as_json: bool) -> None:
    """The namespace's inactive topic policies ("-": not set, the broker's settings apply)."""
    print_value(admin.namespaces.get_inactive_topic_policies(namespace), as_json)


@namespaces.command("remove-inactive-topic-policies")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@pass_admin
def remove_namespace(admin: AdminClient, namespace: str) -> None:
    """Unset the namespace's inactive topic policies (the broker's settings apply)."""
    admin.namespaces.remove_inactive_topic_policies(namespace)
    done(f"Removed the inactive topic policies of {namespace}")


@topics.command("set-inactive-topic-policies")
@topic_argument
@_policy_options
@pass_admin
def set_topic(admin: AdminClient, topic: str, enable, max_inactive_duration: int, delete_mode: str) -> None:
    """Set whether this topic is deleted when nobody uses it (over its namespace's policies)."""
    admin.topics.set_inactive_topic_policies(topic, policies_json(enable, max_inactive_duration, delete_mode))
    done(f"Set the inactive topic policies of {topic}")


@topics.command("get-inactive-topic-policies")
@topic_argument
@click.option(
    "--applied", is_flag=True, help="What applies: the topic's, else its namespace's, else the broker's."
)
@json_option
@pass_admin
def get_topic(admin: AdminClient, topic: str, applied: bool, as_json: bool) -> None:
    """The topic's inactive topic policies ("-": not set)."""
    print_value(admin.topics.get_inactive_topic_policies(topic, applied=applied), as_json)


@topics.command("remove-inactive-topic-policies")
@topic_argument
@pass_admin
def remove_topic(admin: AdminClient, topic: str) -> None:
    """Remove the topic's own inactive topic policies: its namespace's apply."""
    admin.topics.remove_inactive_topic_policies(topic)
    done(f"Removed the inactive topic policies of {topic}")
