"""``magnetar admin clusters``: the broker's cluster and remote ones for geo-replication (list, get,
create, update, delete), as pulsar-admin's clusters."""

from __future__ import annotations

import click

from magnetar.cli.admin.common import done, json_option, pass_admin, print_mapping, print_names
from magnetar.client.admin import AdminClient
from magnetar.client.admin.clusters import cluster_data


@click.group("clusters")
def clusters() -> None:
    """The broker's cluster and remote clusters (geo-replication)."""


@clusters.command("list")
@json_option
@pass_admin
def list_clusters(admin: AdminClient, as_json: bool) -> None:
    """The clusters, one per line: the broker's cluster_name and the remote ones registered."""
    print_names(admin.clusters.list(), as_json)


@clusters.command("get")
@click.argument("cluster")
@json_option
@pass_admin
def get_cluster(admin: AdminClient, cluster: str, as_json: bool) -> None:
    """A cluster's service URLs (serviceUrl, brokerServiceUrl and the TLS ones when served)."""
    print_mapping(admin.clusters.get(cluster), as_json)


def _data_options(command):
    """pulsar-admin's ClusterData flags."""
    options = (
        click.option("--url", help="The remote's admin URL (http://...)."),
        click.option("--url-secure", help="Its admin URL over TLS (https://...)."),
        click.option("--broker-url", help="Its broker service URL (pulsar://...)."),
        click.option("--broker-url-secure", help="Its broker service URL over TLS (pulsar+ssl://...)."),
        click.option("--auth-plugin", help="The client authentication plugin used there."),
        click.option("--auth-parameters", help="That plugin's parameters."),
        click.option("--tls-enable", is_flag=True, default=None, help="Use TLS towards the remote."),
        click.option(
            "--tls-allow-insecure", is_flag=True, default=None, help="Accept untrusted certificates."
        ),
        click.option("--tls-trust-certs-filepath", help="CA certificates to trust there."),
    )
    for option in reversed(options):
        command = option(command)
    return click.argument("cluster")(command)


def _data(
    url,
    url_secure,
    broker_url,
    broker_url_secure,
    auth_plugin,
    auth_parameters,
    tls_enable,
    tls_allow_insecure,
    tls_trust_certs_filepath,
) -> dict:
    return cluster_data(
        url,
        broker_url,
        url_secure,
        broker_url_secure,
        authenticationPlugin=auth_plugin,
        authenticationParameters=auth_parameters,
        brokerClientTlsEnabled=tls_enable,
        tlsAllowInsecureConnection=tls_allow_insecure,
        brokerClientTrustCertsFilePath=tls_trust_certs_filepath,
    )


@clusters.command("create")
@_data_options
@pass_admin
def create_cluster(admin: AdminClient, cluster: str, **options) -> None:
    """Register a remote cluster to replicate to (exit 4 if it is known)."""
    admin.clusters.create(cluster, _data(**options))
    done(f"Created cluster {cluster}")


@clusters.command("update")
@_data_options
@pass_admin
def update_cluster(admin: AdminClient, cluster: str, **options) -> None:
    """Replace a remote cluster's URLs and parameters."""
    admin.clusters.update(cluster, _data(**options))
    done(f"Updated cluster {cluster}")


@clusters.command("delete")
@click.argument("cluster")
@pass_admin
def delete_cluster(admin: AdminClient, cluster: str) -> None:
    """Forget a remote cluster (refused while a namespace or topic replicates to it)."""
    admin.clusters.delete(cluster)
    done(f"Deleted cluster {cluster}")
