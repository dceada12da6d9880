"""``magnetar admin``: pulsar-admin's verbs for what the broker's admin API serves.

Each resource is a click group in its own module, registered here; they share ``common.py``'s
connection flags, output and exit codes.
"""

from __future__ import annotations

import click

from magnetar.cli.admin import (  # noqa: F401  (their verbs join topics, namespaces)
    bundles,
    compaction,
    compaction_threshold,
    inactive_topics,
    offload,
    topic_replication,
)
from magnetar.cli.admin.clusters import clusters
from magnetar.cli.admin.common import DEFAULT_ADMIN_URL, AdminTarget
from magnetar.cli.admin.namespaces import namespaces
from magnetar.cli.admin.schemas import schemas
from magnetar.cli.admin.subscriptions import subscriptions
from magnetar.cli.admin.tenants import tenants
from magnetar.cli.admin.topics import topics
from magnetar.cli.connection import credential_options


@click.group("admin", short_help="Tenants, namespaces, topics, subscriptions, schemas (pulsar-admin).")
@click.option(
    "--admin-url",
    "--web-service-url",
    "admin_url",
    default=DEFAULT_ADMIN_URL,
    show_default=True,
    envvar="MAGNETAR_ADMIN_URL",
    metavar="URL",
    help="The broker's admin API: http://host:port or https://host:port (env MAGNETAR_ADMIN_URL).",
)
@credential_options("https://")
@click.pass_context
def admin(
    ctx: click.Context,
    admin_url: str,
    auth_token: str | None,
    tls_trust_certs_file_path: str | None,
    tls_allow_insecure_connection: bool,
) -> None:
    """Administer tenants, namespaces, topics, subscriptions and schemas (pulsar-admin)."""
    ctx.obj = AdminTarget(admin_url, auth_token, tls_trust_certs_file_path, tls_allow_insecure_connection)


for _group in (tenants, namespaces, topics, subscriptions, clusters, schemas):
    admin.add_command(_group)
