"""``magnetar admin clusters``: the broker's cluster (list, get), as pulsar-admin's clusters."""

from __future__ import annotations

import click

from magnetar.cli.admin.common import json_option, pass_admin, print_mapping, print_names
from magnetar.client.admin import AdminClient


@click.group("clusters")
def clusters() -> None:
    """The broker's cluster and the URLs it serves."""


@clusters.command("list")
@json_option
@pass_admin
def list_clusters(admin: AdminClient, as_json: bool) -> None:
    """The clusters, one per line (a broker is one cluster: its cluster_name)."""
    print_names(admin.clusters.list(), as_json)


@clusters.command("get")
@click.argument("cluster")
@json_option
@pass_admin
def get_cluster(admin: AdminClient, cluster: str, as_json: bool) -> None:
    """A cluster's service URLs (serviceUrl, brokerServiceUrl and the TLS ones when served)."""
    print_mapping(admin.clusters.get(cluster), as_json)
