"""Tiered storage's verbs as pulsar-admin has them: ``topics offload -s SIZE`` (keep at most SIZE
locally: the message id is worked out from internalStats as pulsar-admin does), ``topics
offload-status [-w]``, and a namespace's ``get-/set-offload-threshold`` and
``get-/set-/clear-offload-deletion-lag``."""

from __future__ import annotations

from typing import Any

import click

from magnetar.cli.admin.common import (
    AdminCommandError,
    done,
    json_option,
    pass_admin,
    print_json,
    print_value,
)
from magnetar.cli.admin.namespaces import namespaces
from magnetar.cli.admin.policy_values import DURATION, SIZE
from magnetar.cli.admin.run_status import show_run_status
from magnetar.cli.admin.topics import topic_argument, topics
from magnetar.client.admin import AdminClient
from magnetar.client.admin.topics import full_name

_NAMESPACE = click.argument("namespace", metavar="TENANT/NAMESPACE")


def first_ledger_within(ledgers: list[dict[str, Any]], size_threshold: int) -> int | None:
    """The ledger from which on at most ``size_threshold`` bytes are kept (everything before it is
    offloaded); None when the topic holds no more than that (pulsar-admin's rule: from the newest
    ledger back, the first whose sum passes the threshold keeps the ledgers after it)."""
    kept = 0
    previous = ledgers[-1]["ledgerId"] if ledgers else None
    for ledger in reversed(ledgers):
        kept += int(ledger.get("size", 0))
        if kept > size_threshold:
            return previous
        previous = ledger["ledgerId"]
    return None


@topics.command("offload")
@click.option(
    "-s", "--size-threshold", "size", required=True, type=SIZE, help="Keep at most this locally: 10M, 5G."
)
@topic_argument
@pass_admin
def offload(admin: AdminClient, topic: str, size: int) -> None:
    """Offload the topic's older ledgers to the object store, keeping at most SIZE locally."""
    stats = admin.topics.internal_stats(topic)
    ledgers = list(stats.get("ledgers", []))
    if not ledgers:
        raise AdminCommandError("Topic doesn't have any data", 1)
    ledgers[-1] = {**ledgers[-1], "size": stats.get("currentLedgerSize", ledgers[-1].get("size", 0))}
    ledger_id = first_ledger_within(ledgers, size)
    if ledger_id is None:
        click.echo("Nothing to offload")
        return
    admin.topics.trigger_offload(topic, ledger_id)
    click.echo(f"Offload triggered for {full_name(topic)} for messages before {ledger_id}:0:-1")


#: What pulsar-admin says of each status.
_SAYS = {"RUNNING": "Offload is currently running", "SUCCESS": "Offload was a success"}


@topics.command("offload-status")
@topic_argument
@click.option("-w", "--wait-complete", is_flag=True, help="Wait until the offload is over.")
@json_option
@pass_admin
def offload_status(admin: AdminClient, topic: str, wait_complete: bool, as_json: bool) -> None:
    """Whether the topic's last offload (by this command) ran, runs or failed (exit 1 after an error)."""
    says = {**_SAYS, "NOT_RUN": f"Offload has not been run for {full_name(topic)} since broker startup"}
    show_run_status(
        lambda: admin.topics.offload_status(topic),
        wait_complete,
        as_json,
        says,
        "Error offloading",
        error_line="Error in offload",
    )


@namespaces.command("get-offload-threshold")
@_NAMESPACE
@json_option
@pass_admin
def get_offload_threshold(admin: AdminClient, namespace: str, as_json: bool) -> None:
    """Bytes the namespace's topics keep locally before older ledgers are offloaded, and seconds
    after its close a ledger is offloaded (-1: off), as pulsar-admin prints them."""
    size = admin.namespaces.get_offload_threshold(namespace)
    seconds = admin.namespaces.get_offload_threshold_in_seconds(namespace)
    if as_json:
        print_json({"offloadThresholdInBytes": size, "offloadThresholdInSeconds": seconds})
    else:
        click.echo(f"offloadThresholdInBytes: {size}\noffloadThresholdInSeconds: {seconds}")


@namespaces.command("set-offload-threshold")
@_NAMESPACE
@click.option("-s", "--size", required=True, type=SIZE, help="10M, 1G ...; 0: offload at once, -1: off.")
@click.option(
    "-t", "--time", "seconds", type=DURATION, default="-1", help="10m, 5h, 3d ...; -1 (default): not by age."
)
@pass_admin
def set_offload_threshold(admin: AdminClient, namespace: str, size: int, seconds: int) -> None:
    """Offload a topic's older closed ledgers once it holds more than SIZE locally, or once they
    were closed TIME ago (both are set, as pulsar-admin sets them)."""
    admin.namespaces.set_offload_threshold(namespace, size)
    admin.namespaces.set_offload_threshold_in_seconds(namespace, seconds)
    done(f"Set the offload threshold of {namespace} to {size} bytes and {seconds} s")


@namespaces.command("get-offload-deletion-lag")
@_NAMESPACE
@json_option
@pass_admin
def get_offload_deletion_lag(admin: AdminClient, namespace: str, as_json: bool) -> None:
    """How long (ms) an offloaded ledger's local copy stays; nothing: the broker's setting."""
    print_value(admin.namespaces.get_offload_deletion_lag_ms(namespace), as_json)


@namespaces.command("set-offload-deletion-lag")
@_NAMESPACE
@click.option("-l", "--lag", required=True, type=DURATION, help="30m, 4h, 1d ...")
@pass_admin
def set_offload_deletion_lag(admin: AdminClient, namespace: str, lag: int) -> None:
    """Keep an offloaded ledger's local copy this long after its offload is verified."""
    if lag < 0:
        raise click.BadParameter("the lag cannot be negative", param_hint="--lag")
    admin.namespaces.set_offload_deletion_lag_ms(namespace, lag * 1000)
    done(f"Set the offload deletion lag of {namespace} to {lag} s")


@namespaces.command("clear-offload-deletion-lag")
@_NAMESPACE
@pass_admin
def clear_offload_deletion_lag(admin: AdminClient, namespace: str) -> None:
    """Unset the namespace's offload deletion lag (the broker's setting applies)."""
    admin.namespaces.clear_offload_deletion_lag(namespace)
    done(f"Cleared the offload deletion lag of {namespace}")
