"""``magnetar admin topics {set,get,remove}-replication-clusters``: a topic's override of its
namespace's replication clusters, as pulsar-admin's topics verbs."""

from __future__ import annotations

import click

from magnetar.cli.admin.common import comma_list, done, json_option, pass_admin, print_names, print_value
from magnetar.cli.admin.topics import topic_argument, topics
from magnetar.client.admin import AdminClient
from magnetar.client.admin.topics import full_name


@topics.command("set-replication-clusters")
@topic_argument
@click.option("-c", "--clusters", required=True, help="Comma-separated cluster names: a,b.")
@pass_admin
def set_replication_clusters(admin: AdminClient, topic: str, clusters: str) -> None:
    """Set the clusters this topic replicates to (over its namespace's)."""
    admin.topics.set_replication_clusters(topic, comma_list(clusters) or [])
    done(f"Set replication clusters of {full_name(topic)}")


@topics.command("get-replication-clusters")
@topic_argument
@click.option("--applied", is_flag=True, help="What applies: the topic's, else its namespace's.")
@json_option
@pass_admin
def get_replication_clusters(admin: AdminClient, topic: str, applied: bool, as_json: bool) -> None:
    """The topic's replication clusters, one per line."""
    clusters = admin.topics.get_replication_clusters(topic, applied=applied)
    if clusters is None:
        print_value(None, as_json)
    else:
        print_names(clusters, as_json)


@topics.command("remove-replication-clusters")
@topic_argument
@pass_admin
def remove_replication_clusters(admin: AdminClient, topic: str) -> None:
    """Remove the topic's override: its namespace's clusters apply."""
    admin.topics.remove_replication_clusters(topic)
    done(f"Removed replication clusters of {full_name(topic)}")
