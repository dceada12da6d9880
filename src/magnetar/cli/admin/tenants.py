"""``magnetar admin tenants``: pulsar-admin's tenants verbs (superuser calls)."""

from __future__ import annotations

import click

from magnetar.cli.admin.common import comma_list, done, json_option, pass_admin, print_mapping, print_names
from magnetar.client.admin import AdminClient

_CLUSTERS = click.option(
    "-c", "--allowed-clusters", metavar="A,B", help="Clusters the tenant may use, comma-separated."
)
_ROLES = click.option(
    "-r", "--admin-roles", metavar="A,B", help="Roles that administer the tenant, comma-separated."
)


@click.group("tenants")
def tenants() -> None:
    """List, show, create, update and delete tenants."""


@tenants.command("list")
@json_option
@pass_admin
def list_tenants(admin: AdminClient, as_json: bool) -> None:
    """The tenants, one per line."""
    print_names(admin.tenants.list(), as_json)


@tenants.command("get")
@click.argument("tenant")
@json_option
@pass_admin
def get_tenant(admin: AdminClient, tenant: str, as_json: bool) -> None:
    """A tenant's admin roles and allowed clusters."""
    print_mapping(admin.tenants.get(tenant), as_json)


@tenants.command("create")
@click.argument("tenant")
@_CLUSTERS
@_ROLES
@pass_admin
def create_tenant(
    admin: AdminClient, tenant: str, allowed_clusters: str | None, admin_roles: str | None
) -> None:
    """Create a tenant (allowed clusters: the broker's "standalone" unless given)."""
    admin.tenants.create(tenant, comma_list(allowed_clusters), comma_list(admin_roles))
    done(f"Created tenant {tenant}")


@tenants.command("update")
@click.argument("tenant")
@_CLUSTERS
@_ROLES
@pass_admin
def update_tenant(
    admin: AdminClient, tenant: str, allowed_clusters: str | None, admin_roles: str | None
) -> None:
    """Replace a tenant's admin roles or allowed clusters (what is not given is kept)."""
    admin.tenants.update(tenant, comma_list(allowed_clusters), comma_list(admin_roles))
    done(f"Updated tenant {tenant}")


@tenants.command("delete")
@click.argument("tenant")
@pass_admin
def delete_tenant(admin: AdminClient, tenant: str) -> None:
    """Delete a tenant that has no namespaces."""
    admin.tenants.delete(tenant)
    done(f"Deleted tenant {tenant}")
