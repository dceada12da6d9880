"""Bundles and lookups as pulsar-admin's verbs: ``topics lookup`` and ``bundle-range``,
``namespaces bundles``, ``unload`` and ``split-bundle``."""

from __future__ import annotations

import click

from magnetar.cli.admin.common import done, json_option, pass_admin, print_json
from magnetar.cli.admin.namespaces import namespaces
from magnetar.cli.admin.topics import topic_argument, topics
from magnetar.client.admin import AdminClient

_NAMESPACE = click.argument("namespace", metavar="TENANT/NAMESPACE")


@topics.command("lookup")
@topic_argument
@json_option
@pass_admin
def lookup(admin: AdminClient, topic: str, as_json: bool) -> None:
    """The broker serving the topic: its URL (all of Pulsar's LookupData with --json)."""
    if as_json:
        print_json(admin.lookups.lookup_topic_data(topic))
    else:
        click.echo(admin.lookups.lookup_topic(topic))


@topics.command("bundle-range")
@topic_argument
@pass_admin
def bundle_range(admin: AdminClient, topic: str) -> None:
    """The range of the bundle the topic is in (0x00000000_0x40000000)."""
    click.echo(admin.lookups.get_bundle_range(topic))


@namespaces.command("bundles")
@_NAMESPACE
@pass_admin
def bundles(admin: AdminClient, namespace: str) -> None:
    """The namespace's bundles: their boundaries and count (JSON, as pulsar-admin prints them)."""
    print_json(admin.namespaces.get_bundles(namespace))


@namespaces.command("unload")
@_NAMESPACE
@click.option("-b", "--bundle", help="One bundle ({start}_{end}); all of them without it.")
@pass_admin
def unload(admin: AdminClient, namespace: str, bundle: str | None) -> None:
    """Unload the namespace's bundles (or one): their topics close, clients reconnect to the owner."""
    if bundle is None:
        admin.namespaces.unload(namespace)
        done(f"Unloaded namespace {namespace}")
    else:
        admin.namespaces.unload_namespace_bundle(namespace, bundle)
        done(f"Unloaded bundle {namespace}/{bundle}")


@namespaces.command("split-bundle")
@_NAMESPACE
@click.option("-b", "--bundle", required=True, help="The bundle to split ({start}_{end}).")
@click.option("-u", "--unload", "unload_halves", is_flag=True, help="Unload the two halves afterwards.")
@pass_admin
def split_bundle(admin: AdminClient, namespace: str, bundle: str, unload_halves: bool) -> None:
    """Split a bundle in two halves (range_equally_divide)."""
    admin.namespaces.split_namespace_bundle(namespace, bundle, unload_halves)
    done(f"Split bundle {namespace}/{bundle}")
