"""The admin client's replication calls (``admin.clusters.create/update/delete``, a namespace's
and a topic's replication clusters) against a real broker, read back through each other."""

from __future__ import annotations

import pytest

from magnetar.client.admin import AdminClient, ConflictError, ForbiddenError, NotFoundError
from magnetar.client.admin.clusters import cluster_data
from magnetar.client.admin.errors import AdminError

pytestmark = pytest.mark.interop


def test_clusters_namespace_and_topic_replication(broker) -> None:
    admin = AdminClient(broker.http_url)
    west = cluster_data(
        "http://west:8080",
        "pulsar://west:6650",
        authenticationParameters="token:x",
        brokerClientTlsEnabled=False,
    )
    admin.clusters.create("west", west)
    assert admin.clusters.list() == ["standalone", "west"]
    assert admin.clusters.get("west") == west
    with pytest.raises(ConflictError):
        admin.clusters.create("west", west)
    admin.clusters.update("west", cluster_data("http://west2:8080"))
    assert admin.clusters.get("west") == {"serviceUrl": "http://west2:8080"}
    with pytest.raises(NotFoundError):
        admin.clusters.update("east", west)

    ns = admin.namespaces
    assert ns.get_namespace_replication_clusters("public/default") == ["standalone"]
    with pytest.raises(ForbiddenError):
        ns.set_namespace_replication_clusters("public/default", ["standalone", "west"])
    admin.tenants.update("public", allowed_clusters=["standalone", "west"])
    ns.set_namespace_replication_clusters("public/default", ["standalone", "west"])
    assert ns.get_namespace_replication_clusters("public/default") == ["standalone", "west"]
    assert ns.policies("public/default")["replication_clusters"] == ["standalone", "west"]
    with pytest.raises(AdminError) as refused:
        admin.clusters.delete("west")
    assert refused.value.status == 412

    topic = "persistent://public/default/readings"
    assert admin.topics.get_replication_clusters(topic) is None
    assert admin.topics.get_replication_clusters(topic, applied=True) == ["standalone", "west"]
    admin.topics.set_replication_clusters(topic, ["standalone"])
    assert admin.topics.get_replication_clusters(topic) == ["standalone"]
    admin.topics.remove_replication_clusters(topic)
    assert admin.topics.get_replication_clusters(topic) is None

    ns.set_namespace_replication_clusters("public/default", ["standalone"])
    admin.clusters.delete("west")
    assert admin.clusters.list() == ["standalone"]
