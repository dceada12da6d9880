"""Geo-replication's model through Pulsar's admin v2 paths: remote clusters, tenants' allowed
clusters, namespaces' replication clusters and topics' overrides; refusals and a restart."""

from __future__ import annotations

import pytest

from .support import admin_call as call

pytestmark = pytest.mark.interop

WEST = {
    "serviceUrl": "http://west.example:8080",
    "brokerServiceUrl": "pulsar://west.example:6650",
    "brokerServiceUrlTls": "pulsar+ssl://west.example:6651",
    "authenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
    "authenticationParameters": "token:abc",
    "brokerClientTlsEnabled": True,
    "tlsAllowInsecureConnection": False,
    "brokerClientTrustCertsFilePath": "/certs/ca.pem",
}
NS = "/admin/v2/namespaces/public/default"
TOPIC = "/admin/v2/persistent/public/default/readings"


def test_clusters_are_registered_updated_and_deleted(broker):
    assert call(broker, "GET", "/admin/v2/clusters") == (200, ["standalone"])
    assert call(broker, "PUT", "/admin/v2/clusters/west", WEST)[0] == 204
    assert call(broker, "PUT", "/admin/v2/clusters/west", WEST)[0] == 409
    assert call(broker, "PUT", "/admin/v2/clusters/standalone", WEST)[0] == 409
    assert call(broker, "GET", "/admin/v2/clusters") == (200, ["standalone", "west"])
    assert call(broker, "GET", "/admin/v2/clusters/west") == (200, WEST)
    assert call(broker, "GET", "/admin/v2/clusters/standalone")[1]["brokerServiceUrl"] == broker.service_url

    assert call(broker, "PUT", "/admin/v2/clusters/bad", {"serviceUrl": "ftp://x"})[0] == 400
    assert call(broker, "PUT", "/admin/v2/clusters/bad", {"brokerServiceUrl": "pulsar://x:6650"})[0] == 400
    assert call(broker, "PUT", "/admin/v2/clusters/bad", {**WEST, "brokerServiceUrl": "http://x"})[0] == 400
    assert call(broker, "PUT", "/admin/v2/clusters/bad", {**WEST, "brokerClientTlsEnabled": "yes"})[0] == 400
    assert call(broker, "PUT", "/admin/v2/clusters/bad%20name", WEST)[0] == 400

    moved = {"serviceUrl": "http://west2.example:8080", "brokerServiceUrl": "pulsar://west2.example:6650"}
    assert call(broker, "POST", "/admin/v2/clusters/west", moved)[0] == 204
    assert call(broker, "GET", "/admin/v2/clusters/west") == (200, moved)
    assert call(broker, "POST", "/admin/v2/clusters/nowhere", moved)[0] == 404
    assert call(broker, "POST", "/admin/v2/clusters/standalone", moved)[0] == 412

    assert call(broker, "DELETE", "/admin/v2/clusters/west")[0] == 204
    assert call(broker, "DELETE", "/admin/v2/clusters/west")[0] == 404
    assert call(broker, "DELETE", "/admin/v2/clusters/standalone")[0] == 412
    assert call(broker, "GET", "/admin/v2/clusters/west")[0] == 404


def test_tenants_allowed_clusters_must_exist(broker):
    assert call(broker, "PUT", "/admin/v2/tenants/acme", {"allowedClusters": ["west"]})[0] == 412
    assert call(broker, "PUT", "/admin/v2/tenants/acme", {"adminRoles": []})[0] == 204
    assert call(broker, "GET", "/admin/v2/tenants/acme")[1]["allowedClusters"] == ["standalone"]
    assert call(broker, "PUT", "/admin/v2/clusters/west", WEST)[0] == 204
    assert (
        call(broker, "POST", "/admin/v2/tenants/acme", {"allowedClusters": ["standalone", "west"]})[0] == 204
    )
    assert call(broker, "POST", "/admin/v2/tenants/acme", {"allowedClusters": ["east"]})[0] == 412


def test_namespace_replication_clusters(broker):
    assert call(broker, "GET", f"{NS}/replication") == (200, ["standalone"])
    assert call(broker, "GET", NS)[1]["replication_clusters"] == ["standalone"]
    assert call(broker, "POST", f"{NS}/replication", ["west"])[0] == 412, "unknown cluster"
    assert call(broker, "PUT", "/admin/v2/clusters/west", WEST)[0] == 204
    assert call(broker, "POST", f"{NS}/replication", ["standalone", "west"])[0] == 403, (
        "not allowed by tenant"
    )
    tenant = {"adminRoles": [], "allowedClusters": ["standalone", "west"]}
    assert call(broker, "POST", "/admin/v2/tenants/public", tenant)[0] == 204
    assert call(broker, "POST", f"{NS}/replication", [])[0] == 412
    assert call(broker, "POST", f"{NS}/replication", ["global"])[0] == 412
    assert call(broker, "POST", f"{NS}/replication", "west")[0] == 400
    assert call(broker, "POST", "/admin/v2/namespaces/public/none/replication", ["west"])[0] == 404
    assert call(broker, "POST", f"{NS}/replication", ["standalone", "west"])[0] == 204
    assert call(broker, "GET", f"{NS}/replication") == (200, ["standalone", "west"])
    assert call(broker, "GET", NS)[1]["replication_clusters"] == ["standalone", "west"]

    # In use: the cluster stays, and the tenant may not drop it.
    assert call(broker, "DELETE", "/admin/v2/clusters/west")[0] == 412
    assert call(broker, "POST", "/admin/v2/tenants/public", {"allowedClusters": ["standalone"]})[0] == 412
    assert call(broker, "POST", f"{NS}/replication", ["standalone"])[0] == 204
    assert call(broker, "DELETE", "/admin/v2/clusters/west")[0] == 204


def test_topic_replication_override(broker):
    assert call(broker, "PUT", "/admin/v2/clusters/west", WEST)[0] == 204
    assert call(broker, "PUT", "/admin/v2/clusters/north", {"serviceUrl": "http://north:8080"})[0] == 204
    tenant = {"allowedClusters": ["standalone", "west", "north"]}
    assert call(broker, "POST", "/admin/v2/tenants/public", tenant)[0] == 204
    assert call(broker, "POST", f"{NS}/replication", ["standalone", "west"])[0] == 204

    assert call(broker, "GET", f"{TOPIC}/replication") == (204, None)
    assert call(broker, "GET", f"{TOPIC}/replication?applied=true") == (200, ["standalone", "west"])
    assert call(broker, "POST", f"{TOPIC}/replication", ["south"])[0] == 412
    assert call(broker, "POST", f"{TOPIC}/replication", ["north"])[0] == 204
    assert call(broker, "GET", f"{TOPIC}/replication") == (200, ["north"])
    assert call(broker, "GET", f"{TOPIC}/replication?applied=true") == (200, ["north"])
    assert call(broker, "DELETE", "/admin/v2/clusters/north")[0] == 412, "a topic replicates to it"
    assert call(broker, "DELETE", f"{TOPIC}/replication")[0] == 204
    assert call(broker, "GET", f"{TOPIC}/replication") == (204, None)
    assert call(broker, "POST", "/admin/v2/persistent/public/none/t/replication", ["north"])[0] == 404


def test_replication_model_survives_a_restart(broker):
    assert call(broker, "PUT", "/admin/v2/clusters/west", WEST)[0] == 204
    tenant = {"adminRoles": [], "allowedClusters": ["standalone", "west"]}
    assert call(broker, "POST", "/admin/v2/tenants/public", tenant)[0] == 204
    assert call(broker, "POST", f"{NS}/replication", ["standalone", "west"])[0] == 204
    assert call(broker, "POST", f"{TOPIC}/replication", ["west"])[0] == 204
    assert broker.stop() == 0
    broker.restart(same_port=False)
    assert call(broker, "GET", "/admin/v2/clusters") == (200, ["standalone", "west"])
    assert call(broker, "GET", "/admin/v2/clusters/west") == (200, WEST)
    assert call(broker, "GET", "/admin/v2/tenants/public")[1]["allowedClusters"] == ["standalone", "west"]
    assert call(broker, "GET", f"{NS}/replication") == (200, ["standalone", "west"])
    assert call(broker, "GET", f"{TOPIC}/replication") == (200, ["west"])
