"""``magnetar admin namespaces|topics {set,get,remove}-compaction-threshold``: bytes not compacted yet
past which a topic is compacted by itself, as pulsar-admin's verbs and flags (``-t 10M``; a topic's
``get`` takes ``--applied``/``-ap``)."""

from __future__ import annotations

import click

from magnetar.cli.admin.common import done, json_option, pass_admin, print_value
from magnetar.cli.admin.namespaces import namespaces
from magnetar.cli.admin.policy_values import SIZE
from magnetar.cli.admin.topics import topic_argument, topics
from magnetar.client.admin import AdminClient

_THRESHOLD = click.option(
    "-t",
    "--threshold",
    type=SIZE,
    required=True,
    help="Bytes of backlog not compacted yet before compaction starts by itself: 10M, 16G, 3T...;"
    " 0 turns it off.",
)


@namespaces.command("set-compaction-threshold")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@_THRESHOLD
@pass_admin
def set_namespace(admin: AdminClient, namespace: str, threshold: int) -> None:
    """Compact the namespace's topics by themselves past a backlog not compacted yet."""
    admin.namespaces.set_compaction_threshold(namespace, threshold)
    done(f"Set the compaction threshold of {namespace} to {threshold} bytes")


@namespaces.command("get-compaction-threshold")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@json_option
@pass_admin
def get_namespace(admin: AdminClient, namespace: str, as_json: bool) -> None:
    """The namespace's compaction threshold in bytes ("not set": the broker's setting applies)."""
    print_value(admin.namespaces.get_compaction_threshold(namespace), as_json)


@namespaces.command("remove-compaction-threshold")
@click.argument("namespace", metavar="TENANT/NAMESPACE")
@pass_admin
def remove_namespace(admin: AdminClient, namespace: str) -> None:
    """Unset the namespace's compaction threshold (the broker's setting applies)."""
    admin.namespaces.remove_compaction_threshold(namespace)
    done(f"Removed the compaction threshold of {namespace}")


@topics.command("set-compaction-threshold")
@topic_argument
@_THRESHOLD
@pass_admin
def set_topic(admin: AdminClient, topic: str, threshold: int) -> None:
    """Compact this topic by itself past a backlog not compacted yet (over its namespace's)."""
    admin.topics.set_compaction_threshold(topic, threshold)
    done(f"Set the compaction threshold of {topic} to {threshold} bytes")


@topics.command("get-compaction-threshold")
@topic_argument
@click.option(
    "-ap",
    "--applied",
    is_flag=True,
    help="What applies: the topic's, else its namespace's, else the broker's.",
)
@json_option
@pass_admin
def get_topic(admin: AdminClient, topic: str, applied: bool, as_json: bool) -> None:
    """The topic's compaction threshold in bytes ("not set": its namespace's or the broker's applies)."""
    print_value(admin.topics.get_compaction_threshold(topic, applied=applied), as_json)


@topics.command("remove-compaction-threshold")
@topic_argument
@pass_admin
def remove_topic(admin: AdminClient, topic: str) -> None:
    """Unset the topic's compaction threshold (its namespace's or the broker's applies)."""
    admin.topics.remove_compaction_threshold(topic)
    done(f"Removed the compaction threshold of {topic}")
