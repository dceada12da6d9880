"""The admin client's typed resources (``admin.tenants``, ``.namespaces``, ``.clusters``,
``.schemas``) against a real broker: each call does what its name says, read back through another."""

from __future__ import annotations

import base64

import pytest

from magnetar.client.admin import AdminClient, ConflictError, ForbiddenError, NotFoundError
from magnetar.client.admin.namespaces import MAX_PRODUCERS_PER_TOPIC, MESSAGE_AGE
from magnetar.client.admin.schemas import schema_payload
from magnetar.security import tokens
from tests.interop.tls_certs import tls_settings

AVRO = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}'


@pytest.mark.slow
def test_tenants_namespaces_clusters_and_schemas(broker) -> None:
    admin = AdminClient(broker.http_url)

    # Tenants: create, read, update, list, and a second create refused.
    admin.tenants.create("acme", admin_roles=["ops"])
    assert admin.tenants.get("acme") == {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
    admin.tenants.update("acme", admin_roles=["ops", "dev"])
    assert admin.tenants.get("acme")["adminRoles"] == ["ops", "dev"]
    assert admin.tenants.get("acme")["allowedClusters"] == ["standalone"]
    assert set(admin.tenants.list()) >= {"public", "acme"}
    with pytest.raises(ConflictError):
        admin.tenants.create("acme")

    # Namespaces and their policies.
    ns = admin.namespaces
    ns.create("acme/web")
    assert ns.list("acme") == ["acme/web"]
    assert ns.get_retention("acme/web") is None
    ns.set_retention("acme/web", 180, 1024)
    assert ns.get_retention("acme/web") == {"retentionTimeInMinutes": 180, "retentionSizeInMB": 1024}
    ns.set_message_ttl("acme/web", 60)
    ns.set_deduplication("acme/web", True)
    ns.set_policy("acme/web", MAX_PRODUCERS_PER_TOPIC, 3)
    ns.set_backlog_quota("acme/web", limit_time=600, quota_type=MESSAGE_AGE)
    policies = ns.policies("acme/web")
    assert policies["message_ttl_seconds"] == 60
    assert policies["deduplication_enabled"] is True
    assert policies["max_producers_per_topic"] == 3
    assert ns.get_backlog_quotas("acme/web") == {
        MESSAGE_AGE: {"limitSize": -1, "limitTime": 600, "policy": "producer_request_hold"}
    }
    ns.remove_retention("acme/web")
    ns.remove_message_ttl("acme/web")
    ns.remove_backlog_quota("acme/web", MESSAGE_AGE)
    assert ns.get_retention("acme/web") is None
    assert ns.get_message_ttl("acme/web") is None
    assert ns.get_backlog_quotas("acme/web") == {}
    ns.set_auto_topic_creation("acme/web", True, "partitioned", 4)
    assert ns.get_auto_topic_creation("acme/web")["defaultNumPartitions"] == 4
    ns.set_schema_compatibility_strategy("acme/web", "FULL")
    assert ns.get_schema_compatibility_strategy("acme/web") == "FULL"

    # Grants.
    ns.grant_permission("acme/web", "reader", ["consume"])
    assert ns.get_permissions("acme/web") == {"reader": ["consume"]}
    ns.revoke_permission("acme/web", "reader")
    assert ns.get_permissions("acme/web") == {}

    # The broker's one cluster.
    assert admin.clusters.list() == ["standalone"]
    data = admin.clusters.get("standalone")
    assert data["serviceUrl"] == broker.http_url
    assert data["brokerServiceUrl"] == broker.service_url
    assert "serviceUrlTls" not in data
    with pytest.raises(NotFoundError):
        admin.clusters.get("elsewhere")

    # Schemas: upload, read, test, delete.
    topic = "persistent://acme/web/readings"
    payload = schema_payload("AVRO", AVRO)
    assert admin.schemas.upload(topic, payload) == 0
    assert admin.schemas.get(topic)["data"] == AVRO
    assert admin.schemas.get(topic, 0)["type"] == "AVRO"
    assert admin.schemas.version_of(topic, payload) == 0
    assert admin.schemas.test_compatibility(topic, payload)["compatibility"] is True
    assert [s["version"] for s in admin.schemas.get_all(topic)] == [0]
    admin.schemas.delete(topic)
    with pytest.raises(NotFoundError):
        admin.schemas.get(topic)

    # Deletes, and what is gone is not found.
    ns.delete("acme/web")
    admin.tenants.delete("acme")
    with pytest.raises(NotFoundError):
        admin.tenants.get("acme")


def test_cluster_data_names_the_tls_urls_served_and_only_superusers_read_it(broker_factory, tls_files):
    key = tokens.create_secret_key()
    settings = tls_settings(
        tls_files,
        authentication_enabled=True,
        token_secret_key="data:;base64," + base64.b64encode(key).decode(),
        authorization_enabled=True,
        superuser_roles=["root"],
        cluster_name="east",
    )
    broker = broker_factory(settings)
    trust = str(tls_files.ca)
    root = AdminClient(
        broker.https_url, token=tokens.create_token(key, "root", 600), tls_trust_certs_file_path=trust
    )

    assert root.clusters.list() == ["east"]
    assert root.clusters.get("east") == {
        "serviceUrl": broker.http_url,
        "serviceUrlTls": broker.https_url,
        "brokerServiceUrl": broker.service_url,
        "brokerServiceUrlTls": broker.service_url_tls,
    }
    with pytest.raises(NotFoundError):
        root.clusters.get("standalone")
    someone = AdminClient(broker.http_url, token=tokens.create_token(key, "someone", 600))
    with pytest.raises(ForbiddenError, match="super-user"):
        someone.clusters.list()
