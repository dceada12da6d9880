"""``magnetar admin namespaces``: pulsar-admin's namespaces verbs for what the broker serves:
namespaces, their policies (get-X, set-X, remove-X) and the grants on them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from magnetar.cli.admin.common import (
    comma_list,
    done,
    json_option,
    pass_admin,
    print_json,
    print_mapping,
    print_names,
    print_table,
    print_value,
)
from magnetar.cli.admin.policy_values import DURATION, SIZE, minutes_of, size_in_mb
from magnetar.client.admin import AdminClient
from magnetar.client.admin import namespaces as policy

_QUOTA_TYPES = click.Choice(["destination_storage", "message_age"])
_QUOTA_POLICIES = click.Choice(["producer_request_hold", "producer_exception", "consumer_backlog_eviction"])
_STRATEGIES = click.Choice(
    [
        "ALWAYS_COMPATIBLE",
        "ALWAYS_INCOMPATIBLE",
        "BACKWARD",
        "FORWARD",
        "FULL",
        "BACKWARD_TRANSITIVE",
        "FORWARD_TRANSITIVE",
        "FULL_TRANSITIVE",
    ],
    case_sensitive=False,
)
_NAMESPACE = click.argument("namespace", metavar="TENANT/NAMESPACE")


@click.group("namespaces")
def namespaces() -> None:
    """Namespaces, their policies and the permissions granted on them."""


# -- replication clusters ---------------------------------------------------------------------------
@namespaces.command("set-clusters")
@_NAMESPACE
@click.option("-c", "--clusters", required=True, help="Comma-separated cluster names: a,b.")
@pass_admin
def set_clusters(admin: AdminClient, namespace: str, clusters: str) -> None:
    """Set the clusters the namespace replicates to."""
    admin.namespaces.set_namespace_replication_clusters(namespace, comma_list(clusters) or [])
    done(f"Set replication clusters of {namespace}")


@namespaces.command("get-clusters")
@_NAMESPACE
@json_option
@pass_admin
def get_clusters(admin: AdminClient, namespace: str, as_json: bool) -> None:
    """The clusters the namespace replicates to, one per line."""
    print_names(admin.namespaces.get_namespace_replication_clusters(namespace), as_json)


# -- namespaces -------------------------------------------------------------------------------------
@namespaces.command("list")
@click.argument("tenant")
@json_option
@pass_admin
def list_namespaces(admin: AdminClient, tenant: str, as_json: bool) -> None:
    """A tenant's namespaces, one per line."""
    print_names(admin.namespaces.list(tenant), as_json)


@namespaces.command("create")
@_NAMESPACE
@click.option(
    "-b", "--bundles", type=click.IntRange(min=1), help="Bundles to cut it into (the broker's default: 4)."
)
@pass_admin
def create_namespace(admin: AdminClient, namespace: str, bundles: int | None) -> None:
    """Create a namespace (exit 4 if it exists)."""
    admin.namespaces.create(namespace, bundles)
    done(f"Created namespace {namespace}")


@namespaces.command("delete")
@_NAMESPACE
@pass_admin
def delete_namespace(admin: AdminClient, namespace: str) -> None:
    """Delete a namespace that has no topics."""
    admin.namespaces.delete(namespace)
    done(f"Deleted namespace {namespace}")


@namespaces.command("policies")
@_NAMESPACE
@json_option
@pass_admin
def show_policies(admin: AdminClient, namespace: str, as_json: bool) -> None:
    """Every policy of the namespace ("-": not set, the broker's setting applies)."""
    print_mapping(admin.namespaces.policies(namespace), as_json)


# -- get-X / set-X / remove-X -----------------------------------------------------------------------
def _getter(name: str, what: str, read: Callable[[AdminClient, str], Any]) -> None:
    @namespaces.command(f"get-{name}", help=f"The namespace's {what}.")
    @_NAMESPACE
    @json_option
    @pass_admin
    def get(admin: AdminClient, namespace: str, as_json: bool) -> None:
        print_value(read(admin, namespace), as_json)


def _remover(name: str, what: str, remove: Callable[[AdminClient, str], None]) -> None:
    @namespaces.command(
        f"remove-{name}", help=f"Unset the namespace's {what} (the broker's setting applies)."
    )
    @_NAMESPACE
    @pass_admin
    def unset(admin: AdminClient, namespace: str) -> None:
        remove(admin, namespace)
        done(f"Removed the {what} of {namespace}")


def _one_value_policy(name: str, path: str, what: str) -> None:
    """get-NAME and remove-NAME of a policy the broker serves at ``path``."""
    _getter(name, what, lambda admin, ns: admin.namespaces.get_policy(ns, path))
    _remover(name, what, lambda admin, ns: admin.namespaces.remove_policy(ns, path))


def _limit_policy(name: str, path: str, flags: tuple[str, str], what: str) -> None:
    """get-, set- and remove- of a limit (a count; 0: no limit)."""
    _one_value_policy(name, path, what)

    @namespaces.command(f"set-{name}", help=f"Set the namespace's {what} (0: no limit).")
    @_NAMESPACE
    @click.option(*flags, "limit", required=True, type=click.IntRange(min=0), help=f"The {what}.")
    @pass_admin
    def set_limit(admin: AdminClient, namespace: str, limit: int) -> None:
        admin.namespaces.set_policy(namespace, path, limit)
        done(f"Set the {what} of {namespace} to {limit}")


_limit_policy(
    "max-producers-per-topic",
    policy.MAX_PRODUCERS_PER_TOPIC,
    ("-p", "--max-producers-per-topic"),
    "producers per topic",
)
_limit_policy(
    "max-consumers-per-topic",
    policy.MAX_CONSUMERS_PER_TOPIC,
    ("-c", "--max-consumers-per-topic"),
    "consumers per topic",
)
_limit_policy(
    "max-consumers-per-subscription",
    policy.MAX_CONSUMERS_PER_SUBSCRIPTION,
    ("-c", "--max-consumers-per-subscription"),
    "consumers per subscription",
)
_limit_policy(
    "max-topics-per-namespace",
    policy.MAX_TOPICS_PER_NAMESPACE,
    ("-t", "--max-topics-per-namespace"),
    "topics limit",
)

# Retention.
_getter("retention", "retention", lambda admin, ns: admin.namespaces.get_retention(ns))
_remover("retention", "retention", lambda admin, ns: admin.namespaces.remove_retention(ns))


@namespaces.command("set-retention")
@_NAMESPACE
@click.option(
    "-s", "--size", required=True, type=SIZE, help="Keep up to this much: 10M, 1G...; -1: no limit."
)
@click.option(
    "-t", "--time", "time_", required=True, type=DURATION, help="Keep this long: 30m, 3h, 2d...; -1: forever."
)
@pass_admin
def set_retention(admin: AdminClient, namespace: str, size: int, time_: int) -> None:
    """Keep acknowledged messages for a time and up to a size."""
    admin.namespaces.set_retention(namespace, minutes_of(time_), size_in_mb(size))
    done(f"Set the retention of {namespace}")


# Message TTL.
_one_value_policy("message-ttl", policy.MESSAGE_TTL, "message TTL (seconds)")


@namespaces.command("set-message-ttl")
@_NAMESPACE
@click.option("-ttl", "--messageTTL", "ttl", required=True, type=DURATION, help="Seconds, or 30m, 1h, 2d...")
@pass_admin
def set_message_ttl(admin: AdminClient, namespace: str, ttl: int) -> None:
    """Expire unacknowledged messages older than this."""
    admin.namespaces.set_message_ttl(namespace, ttl)
    done(f"Set the message TTL of {namespace} to {ttl} s")


# Deduplication.
_one_value_policy("deduplication", policy.DEDUPLICATION, "deduplication")


@namespaces.command("set-deduplication")
@_NAMESPACE
@click.option(
    "-e", "--enable", "enable", flag_value=True, default=None, help="Deduplicate producers' messages."
)
@click.option("-d", "--disable", "enable", flag_value=False, help="Do not deduplicate.")
@pass_admin
def set_deduplication(admin: AdminClient, namespace: str, enable: bool | None) -> None:
    """Turn message deduplication on or off for the namespace."""
    if enable is None:
        raise click.UsageError("give --enable or --disable")
    admin.namespaces.set_deduplication(namespace, enable)
    done(f"{'Enabled' if enable else 'Disabled'} deduplication on {namespace}")


# Schema compatibility strategy.
_one_value_policy(
    "schema-compatibility-strategy", policy.SCHEMA_COMPATIBILITY_STRATEGY, "schema compatibility strategy"
)


@namespaces.command("set-schema-compatibility-strategy")
@_NAMESPACE
@click.option("-c", "--compatibility", required=True, type=_STRATEGIES, help="The strategy.")
@pass_admin
def set_schema_compatibility_strategy(admin: AdminClient, namespace: str, compatibility: str) -> None:
    """How a new schema version must relate to the existing ones."""
    admin.namespaces.set_schema_compatibility_strategy(namespace, compatibility.upper())
    done(f"Set the schema compatibility strategy of {namespace} to {compatibility.upper()}")


# Auto topic creation.
_one_value_policy("auto-topic-creation", policy.AUTO_TOPIC_CREATION, "auto topic creation")


@namespaces.command("set-auto-topic-creation")
@_NAMESPACE
@click.option("-e", "--enable", "enable", flag_value=True, default=None, help="Create topics on first use.")
@click.option("-d", "--disable", "enable", flag_value=False, help="Do not create topics on first use.")
@click.option(
    "-t",
    "--type",
    "topic_type",
    type=click.Choice(["partitioned", "non-partitioned"]),
    default="non-partitioned",
)
@click.option(
    "-n", "--num-partitions", type=click.IntRange(min=1), default=1, help="Partitions of a partitioned one."
)
@pass_admin
def set_auto_topic_creation(
    admin: AdminClient, namespace: str, enable: bool | None, topic_type: str, num_partitions: int
) -> None:
    """Whether (and as what) a topic is created when first used."""
    if enable is None:
        raise click.UsageError("give --enable or --disable")
    admin.namespaces.set_auto_topic_creation(namespace, enable, topic_type, num_partitions)
    done(f"Set auto topic creation of {namespace}")


# Backlog quotas.
@namespaces.command("get-backlog-quotas")
@_NAMESPACE
@json_option
@pass_admin
def get_backlog_quotas(admin: AdminClient, namespace: str, as_json: bool) -> None:
    """The namespace's backlog quotas, by type (limitSize bytes, limitTime seconds; -1: none)."""
    quotas = admin.namespaces.get_backlog_quotas(namespace)
    if as_json:
        print_json(quotas)
        return
    rows = ((kind, q.get("limitSize"), q.get("limitTime"), q.get("policy")) for kind, q in quotas.items())
    print_table(("type", "limitSize", "limitTime", "policy"), rows, as_json=False)


@namespaces.command("set-backlog-quota")
@_NAMESPACE
@click.option("-l", "--limit", "limit", type=SIZE, default=-1, help="Backlog size: 10M, 1G...; -1: none.")
@click.option(
    "-lt", "--limitTime", "limit_time", type=DURATION, default=-1, help="Oldest message's age: 1h..."
)
@click.option(
    "-p", "--policy", "quota_policy", required=True, type=_QUOTA_POLICIES, help="What happens past it."
)
@click.option(
    "-t", "--type", "quota_type", type=_QUOTA_TYPES, default="destination_storage", show_default=True
)
@pass_admin
def set_backlog_quota(
    admin: AdminClient, namespace: str, limit: int, limit_time: int, quota_policy: str, quota_type: str
) -> None:
    """Limit the backlog of the namespace's topics by size (destination_storage) or age (message_age)."""
    if quota_type == "destination_storage" and limit < 0:
        raise click.UsageError("a destination_storage quota needs --limit")
    if quota_type == "message_age" and limit_time < 0:
        raise click.UsageError("a message_age quota needs --limitTime")
    admin.namespaces.set_backlog_quota(namespace, limit, limit_time, quota_policy, quota_type)
    done(f"Set the {quota_type} backlog quota of {namespace}")


@namespaces.command("remove-backlog-quota")
@_NAMESPACE
@click.option(
    "-t", "--type", "quota_type", type=_QUOTA_TYPES, default="destination_storage", show_default=True
)
@pass_admin
def remove_backlog_quota(admin: AdminClient, namespace: str, quota_type: str) -> None:
    """Remove one type of the namespace's backlog quotas (the broker's default applies)."""
    admin.namespaces.remove_backlog_quota(namespace, quota_type)
    done(f"Removed the {quota_type} backlog quota of {namespace}")


# -- permissions ------------------------------------------------------------------------------------
@namespaces.command("permissions")
@_NAMESPACE
@json_option
@pass_admin
def permissions(admin: AdminClient, namespace: str, as_json: bool) -> None:
    """The roles granted on the namespace and their actions."""
    grants = admin.namespaces.get_permissions(namespace)
    if as_json:
        print_json(grants)
        return
    print_table(
        ("role", "actions"), ((role, ",".join(actions)) for role, actions in grants.items()), as_json=False
    )


@namespaces.command("grant-permission")
@_NAMESPACE
@click.option("--role", required=True, help="The role (a token's subject).")
@click.option(
    "--actions", required=True, metavar="A,B", help="produce, consume, functions, ... comma-separated."
)
@pass_admin
def grant_permission(admin: AdminClient, namespace: str, role: str, actions: str) -> None:
    """Let a role do these actions on the namespace's topics."""
    admin.namespaces.grant_permission(namespace, role, comma_list(actions) or [])
    done(f"Granted {actions} on {namespace} to {role}")


@namespaces.command("revoke-permission")
@_NAMESPACE
@click.option("--role", required=True, help="The role.")
@pass_admin
def revoke_permission(admin: AdminClient, namespace: str, role: str) -> None:
    """Remove a role's grant on the namespace."""
    admin.namespaces.revoke_permission(namespace, role)
    done(f"Revoked the permissions of {role} on {namespace}")
