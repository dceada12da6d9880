"""``magnetar admin topics``: pulsar-admin's ``topics`` verbs and flags for what the broker serves.

Lists print one name a line, stats indented JSON (as pulsar-admin prints them), and every command
with output takes ``--json``; changes confirm on stderr. The subscription verbs are also offered
under plain names by ``magnetar admin subscriptions`` (``subscriptions.py``): the same commands.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from magnetar.cli.admin.common import (
    done,
    json_option,
    pass_admin,
    print_document,
    print_json,
    print_mapping,
    print_names,
)
from magnetar.cli.admin.topic_values import cli_message_id, peeked_record, relative_seconds, render_peeked
from magnetar.client.admin import AdminClient
from magnetar.client.admin.topics import PeekedMessage, full_name

DOMAINS = ("persistent", "non-persistent")


def topic_argument(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.argument("topic", metavar="TOPIC")(command)


def subscription_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("-s", "--subscription", required=True, help="The subscription.")(command)


def _parsed(parse: Callable[[str], Any]) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback turning a flag's text with ``parse`` (ValueError: a usage error, exit 2)."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    return callback


@click.group("topics")
def topics() -> None:
    """Topics and their subscriptions (pulsar-admin topics)."""


# -- listing, creating, deleting -----------------------------------------------------------------------
@topics.command("list")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@click.option(
    "-td",
    "--topic-domain",
    type=click.Choice(DOMAINS),
    help="Only persistent or non-persistent topics (default both).",
)
@json_option
@pass_admin
def list_topics(admin: AdminClient, namespace: str, topic_domain: str | None, as_json: bool) -> None:
    """The namespace's topics, partitions one by one."""
    domains = [topic_domain] if topic_domain else DOMAINS
    print_names([t for d in domains for t in admin.topics.get_list(namespace, d)], as_json)


@topics.command("list-partitioned-topics")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@json_option
@pass_admin
def list_partitioned_topics(admin: AdminClient, namespace: str, as_json: bool) -> None:
    """The namespace's partitioned topics."""
    names = [t for d in DOMAINS for t in admin.topics.get_partitioned_topic_list(namespace, d)]
    print_names(names, as_json)


@topics.command("create")
@topic_argument
@pass_admin
def create(admin: AdminClient, topic: str) -> None:
    """Create a non-partitioned topic."""
    admin.topics.create_non_partitioned_topic(topic)
    done(f"Created {full_name(topic)}")


def _partitions_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "-p", "--partitions", type=click.IntRange(min=1), required=True, help="The number of partitions."
    )(command)


@topics.command("create-partitioned-topic")
@topic_argument
@_partitions_option
@pass_admin
def create_partitioned_topic(admin: AdminClient, topic: str, partitions: int) -> None:
    """Create a partitioned topic."""
    admin.topics.create_partitioned_topic(topic, partitions)
    done(f"Created {full_name(topic)} with {partitions} partitions")


@topics.command("update-partitioned-topic")
@topic_argument
@_partitions_option
@pass_admin
def update_partitioned_topic(admin: AdminClient, topic: str, partitions: int) -> None:
    """Raise a partitioned topic's partition count."""
    admin.topics.update_partitioned_topic(topic, partitions)
    done(f"Updated {full_name(topic)} to {partitions} partitions")


@topics.command("get-partitioned-topic-metadata")
@topic_argument
@json_option
@pass_admin
def get_partitioned_topic_metadata(admin: AdminClient, topic: str, as_json: bool) -> None:
    """A topic's partition count (0: not partitioned)."""
    print_mapping(admin.topics.get_partitioned_topic_metadata(topic), as_json)


@topics.command("delete")
@topic_argument
@pass_admin
def delete(admin: AdminClient, topic: str) -> None:
    """Delete a non-partitioned topic (or one partition)."""
    admin.topics.delete(topic)
    done(f"Deleted {full_name(topic)}")


@topics.command("delete-partitioned-topic")
@topic_argument
@pass_admin
def delete_partitioned_topic(admin: AdminClient, topic: str) -> None:
    """Delete a partitioned topic and its partitions."""
    admin.topics.delete_partitioned_topic(topic)
    done(f"Deleted {full_name(topic)} and its partitions")


@topics.command("terminate")
@topic_argument
@json_option
@pass_admin
def terminate(admin: AdminClient, topic: str, as_json: bool) -> None:
    """Refuse further messages; print the id of the last one stored."""
    last = admin.topics.terminate_topic(topic)
    if as_json:
        print_json(last)
    else:
        click.echo(f"{last['ledgerId']}:{last['entryId']}")
    done(f"Terminated {full_name(topic)}")


# -- stats ------------------------------------------------------------------------------------------------
@topics.command("stats")
@topic_argument
@json_option
@pass_admin
def stats(admin: AdminClient, topic: str, as_json: bool) -> None:
    """A topic's stats (rates, counters, subscriptions, producers) as indented JSON."""
    print_document(admin.topics.stats(topic))


@topics.command("partitioned-stats")
@topic_argument
@click.option("--per-partition", is_flag=True, help="Each partition's stats as well as the sum.")
@json_option
@pass_admin
def partitioned_stats(admin: AdminClient, topic: str, per_partition: bool, as_json: bool) -> None:
    """A partitioned topic's stats, summed over its partitions."""
    print_document(admin.topics.partitioned_stats(topic, per_partition))


@topics.command("stats-internal")
@topic_argument
@json_option
@pass_admin
def stats_internal(admin: AdminClient, topic: str, as_json: bool) -> None:
    """A topic's storage: ledgers, entries, cursors and their positions."""
    print_document(admin.topics.internal_stats(topic))


# -- reading stored messages ---------------------------------------------------------------------------
def _print_messages(messages: list[PeekedMessage], as_json: bool, as_hex: bool) -> None:
    if as_json:
        print_json([peeked_record(m) for m in messages])
        return
    click.echo("\n\n".join(render_peeked(m, as_hex) for m in messages))


def _hex_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--hex", "as_hex", is_flag=True, help="The payload as a hex dump, even if text.")(
        command
    )


@topics.command("peek-messages")
@topic_argument
@subscription_option
@click.option(
    "-n", "--count", type=click.IntRange(min=1), default=1, show_default=True, help="How many messages."
)
@_hex_option
@json_option
@pass_admin
def peek_messages(
    admin: AdminClient, topic: str, subscription: str, count: int, as_hex: bool, as_json: bool
) -> None:
    """Print the next messages of a subscription without consuming them."""
    _print_messages(admin.topics.peek_messages(topic, subscription, count), as_json, as_hex)


@topics.command("get-message-by-id")
@topic_argument
@click.option("-l", "--ledgerId", "--ledger-id", "ledger_id", type=click.IntRange(min=0), required=True)
@click.option("-e", "--entryId", "--entry-id", "entry_id", type=click.IntRange(min=0), required=True)
@_hex_option
@json_option
@pass_admin
def get_message_by_id(
    admin: AdminClient, topic: str, ledger_id: int, entry_id: int, as_hex: bool, as_json: bool
) -> None:
    """Print the stored message(s) of one entry (a batch's messages each)."""
    _print_messages(admin.topics.get_message_by_id(topic, ledger_id, entry_id), as_json, as_hex)


# -- subscriptions -----------------------------------------------------------------------------------
@topics.command("subscriptions")
@topic_argument
@json_option
@pass_admin
def list_subscriptions(admin: AdminClient, topic: str, as_json: bool) -> None:
    """A topic's subscriptions, one a line."""
    print_names(admin.topics.get_subscriptions(topic), as_json)


@topics.command("create-subscription")
@topic_argument
@subscription_option
@click.option(
    "-m",
    "--messageId",
    "--message-id",
    "message_id",
    default="latest",
    show_default=True,
    callback=_parsed(cli_message_id),
    help="Where its cursor starts: latest, earliest or LEDGER:ENTRY[:PARTITION].",
)
@pass_admin
def create_subscription(admin: AdminClient, topic: str, subscription: str, message_id: dict) -> None:
    """Create a durable subscription."""
    admin.topics.create_subscription(topic, subscription, message_id)
    done(f"Created subscription {subscription} on {full_name(topic)}")


@topics.command("unsubscribe")
@topic_argument
@subscription_option
@click.option("-f", "--force", is_flag=True, help="Even with consumers connected (they are closed).")
@pass_admin
def unsubscribe(admin: AdminClient, topic: str, subscription: str, force: bool) -> None:
    """Delete a subscription."""
    admin.topics.delete_subscription(topic, subscription, force)
    done(f"Deleted subscription {subscription} of {full_name(topic)}")


@topics.command("skip")
@topic_argument
@subscription_option
@click.option("-n", "--count", type=click.IntRange(min=0), required=True, help="How many messages.")
@pass_admin
def skip(admin: AdminClient, topic: str, subscription: str, count: int) -> None:
    """Acknowledge the subscription's next messages without delivering them."""
    admin.topics.skip_messages(topic, subscription, count)
    done(f"Skipped {count} messages of {subscription} on {full_name(topic)}")


@topics.command("clear-backlog")
@topic_argument
@subscription_option
@pass_admin
def clear_backlog(admin: AdminClient, topic: str, subscription: str) -> None:
    """Acknowledge every message of the subscription's backlog."""
    admin.topics.skip_all_messages(topic, subscription)
    done(f"Cleared the backlog of {subscription} on {full_name(topic)}")


topics.add_command(clear_backlog, "skip-all")


@topics.command("reset-cursor")
@topic_argument
@subscription_option
@click.option(
    "-t",
    "--time",
    "since",
    callback=_parsed(relative_seconds),
    help="To the messages of this long ago: 30s, 10m, 3h, 2d, 5w.",
)
@click.option(
    "-m",
    "--messageId",
    "--message-id",
    "message_id",
    callback=_parsed(cli_message_id),
    help="To this message: earliest, latest or LEDGER:ENTRY[:PARTITION].",
)
@click.option(
    "-e", "--exclude-reset-position", is_flag=True, help="With -m: just after the message, not at it."
)
@pass_admin
def reset_cursor(
    admin: AdminClient,
    topic: str,
    subscription: str,
    since: int | None,
    message_id: dict | None,
    exclude_reset_position: bool,
) -> None:
    """Move a subscription's cursor back or forth, by time (-t) or to a message (-m)."""
    if (since is None) == (message_id is None):
        raise click.UsageError("give either -t/--time or -m/--messageId")
    if message_id is not None:
        admin.topics.reset_cursor_to_message_id(topic, subscription, message_id, exclude_reset_position)
    elif since is not None:  # always, the check above: one of the two
        admin.topics.reset_cursor(topic, subscription, int((time.time() - since) * 1000))
    done(f"Reset the cursor of {subscription} on {full_name(topic)}")


def _expire_time_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "-t",
        "--expireTime",
        "--expire-time",
        "expire_time",
        required=True,
        callback=_parsed(relative_seconds),
        help="Older than this: seconds, or 10m, 3h, 2d, 5w.",
    )(command)


@topics.command("expire-messages")
@topic_argument
@subscription_option
@_expire_time_option
@pass_admin
def expire_messages(admin: AdminClient, topic: str, subscription: str, expire_time: int) -> None:
    """Acknowledge, for one subscription, the messages older than a time."""
    admin.topics.expire_messages(topic, subscription, expire_time)
    done(f"Expired messages older than {expire_time} s for {subscription} on {full_name(topic)}")


@topics.command("expire-messages-all-subscriptions")
@topic_argument
@_expire_time_option
@pass_admin
def expire_messages_all_subscriptions(admin: AdminClient, topic: str, expire_time: int) -> None:
    """Acknowledge, for every subscription, the messages older than a time."""
    admin.topics.expire_messages_for_all_subscriptions(topic, expire_time)
    done(f"Expired messages older than {expire_time} s for every subscription on {full_name(topic)}")


@topics.command("consumers")
@topic_argument
@subscription_option
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), help="Consumers a page (the broker's default).")
@json_option
@pass_admin
def consumers(
    admin: AdminClient, topic: str, subscription: str, offset: int, limit: int | None, as_json: bool
) -> None:
    """A page of a subscription's consumers (broadcast ones too, detached ones included)."""
    print_document(admin.topics.consumers(topic, subscription, offset, limit))


# -- permissions -------------------------------------------------------------------------------------
@topics.command("permissions")
@topic_argument
@json_option
@pass_admin
def permissions(admin: AdminClient, topic: str, as_json: bool) -> None:
    """The roles allowed on a topic and their actions (the namespace's grants included)."""
    grants = admin.topics.get_permissions(topic)
    print_mapping(
        {role: ",".join(actions) for role, actions in grants.items()} if not as_json else grants, as_json
    )


def _actions(text: str) -> list[str]:
    actions = [a.strip() for a in text.split(",") if a.strip()]
    if not actions:
        raise ValueError("name at least one action: produce, consume, functions, sources, sinks, packages")
    return actions


@topics.command("grant-permission")
@topic_argument
@click.option("--role", required=True, help="The client role.")
@click.option(
    "--actions",
    required=True,
    callback=_parsed(_actions),
    help="Comma-separated: produce, consume (and functions, sources, sinks, packages).",
)
@pass_admin
def grant_permission(admin: AdminClient, topic: str, role: str, actions: list[str]) -> None:
    """Let a role produce and/or consume on a topic."""
    admin.topics.grant_permission(topic, role, actions)
    done(f"Granted {','.join(actions)} on {full_name(topic)} to {role}")


@topics.command("revoke-permission")
@topic_argument
@click.option("--role", required=True, help="The client role.")
@pass_admin
def revoke_permission(admin: AdminClient, topic: str, role: str) -> None:
    """Remove a role's topic-level grant."""
    admin.topics.revoke_permissions(topic, role)
    done(f"Revoked the permissions of {role} on {full_name(topic)}")
