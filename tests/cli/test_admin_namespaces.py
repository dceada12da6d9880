"""``magnetar admin tenants | namespaces | clusters | schemas`` run as a user runs them (a child
process) against a real broker: round trips read back through the commands, ``--json`` parsed,
and the exit codes a shell branches on, with the broker's reason and no traceback."""

from __future__ import annotations

import json
import socket

import pytest

from .conftest import admin, magnetar
from .conftest import admin_ok as ok

pytestmark = pytest.mark.interop

AVRO = '{"type": "record", "name": "Reading", "fields": [{"name": "t", "type": "double"}]}'


def as_json(broker, *args: str):
    return json.loads(ok(broker, *args, "--json"))


def fails(broker, code: int, *args: str) -> str:
    """The one-line error of a command that must end with ``code``."""
    done = admin(broker, *args)
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    return done.stderr


@pytest.mark.slow  # a CLI process per call, dozens of calls
def test_tenants_namespaces_policies_and_permissions_round_trip(broker):
    ok(broker, "tenants", "create", "acme", "--admin-roles", "ops,dev")
    assert "acme" in ok(broker, "tenants", "list").splitlines()
    assert as_json(broker, "tenants", "get", "acme") == {
        "adminRoles": ["ops", "dev"],
        "allowedClusters": ["standalone"],
    }
    ok(broker, "tenants", "update", "acme", "-r", "ops")
    assert as_json(broker, "tenants", "get", "acme")["adminRoles"] == ["ops"]

    ok(broker, "namespaces", "create", "acme/web")
    assert "already exists" in fails(broker, 4, "namespaces", "create", "acme/web").lower()
    assert ok(broker, "namespaces", "list", "acme") == "acme/web\n"
    assert as_json(broker, "namespaces", "list", "acme") == ["acme/web"]

    # Retention: pulsar-admin's units, read back by get-retention and policies.
    ok(broker, "namespaces", "set-retention", "acme/web", "-s", "2G", "-t", "3h")
    assert as_json(broker, "namespaces", "get-retention", "acme/web") == {
        "retentionTimeInMinutes": 180,
        "retentionSizeInMB": 2048,
    }
    policies = as_json(broker, "namespaces", "policies", "acme/web")
    assert (policies["retention_time_minutes"], policies["retention_size_mb"]) == (180, 2048)
    assert "retention_time_minutes" in ok(broker, "namespaces", "policies", "acme/web")
    ok(broker, "namespaces", "remove-retention", "acme/web")
    assert as_json(broker, "namespaces", "get-retention", "acme/web") is None

    # One-value policies and a backlog quota.
    ok(broker, "namespaces", "set-message-ttl", "acme/web", "-ttl", "1h")
    assert ok(broker, "namespaces", "get-message-ttl", "acme/web") == "3600\n"
    ok(broker, "namespaces", "set-deduplication", "acme/web", "--enable")
    assert as_json(broker, "namespaces", "get-deduplication", "acme/web") is True
    ok(broker, "namespaces", "set-max-producers-per-topic", "acme/web", "-p", "2")
    assert ok(broker, "namespaces", "get-max-producers-per-topic", "acme/web") == "2\n"
    ok(broker, "namespaces", "set-backlog-quota", "acme/web", "-l", "10M", "-p", "producer_exception")
    assert as_json(broker, "namespaces", "get-backlog-quotas", "acme/web") == {
        "destination_storage": {"limitSize": 10 * 1024**2, "limitTime": -1, "policy": "producer_exception"}
    }
    ok(broker, "namespaces", "remove-message-ttl", "acme/web")
    assert ok(broker, "namespaces", "get-message-ttl", "acme/web") == ""

    # Permissions.
    grant = ("grant-permission", "acme/web", "--role", "reader", "--actions", "consume,produce")
    ok(broker, "namespaces", *grant)
    assert as_json(broker, "namespaces", "permissions", "acme/web") == {"reader": ["consume", "produce"]}
    assert "reader" in ok(broker, "namespaces", "permissions", "acme/web")
    ok(broker, "namespaces", "revoke-permission", "acme/web", "--role", "reader")
    assert as_json(broker, "namespaces", "permissions", "acme/web") == {}

    # Deleting: a tenant with a namespace is refused, then both go.
    fails(broker, 4, "tenants", "delete", "acme")
    ok(broker, "namespaces", "delete", "acme/web")
    ok(broker, "tenants", "delete", "acme")
    assert "acme" not in ok(broker, "tenants", "list").splitlines()
    fails(broker, 3, "tenants", "get", "acme")


@pytest.mark.slow  # a CLI process per call, dozens of calls
def test_clusters_schemas_and_exit_codes(broker, tmp_path):
    assert ok(broker, "clusters", "list") == "standalone\n"
    cluster = as_json(broker, "clusters", "get", "standalone")
    assert cluster["serviceUrl"] == broker.http_url
    assert cluster["brokerServiceUrl"] == broker.service_url
    assert "does not exist" in fails(broker, 3, "clusters", "get", "elsewhere")

    topic = "persistent://public/default/readings"
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "AVRO", "schema": AVRO, "properties": {"unit": "C"}}))
    assert as_json(broker, "schemas", "upload", topic, "-f", str(schema)) == {"version": 0}
    got = as_json(broker, "schemas", "get", topic)
    assert (got["version"], got["type"], got["data"], got["properties"]) == (0, "AVRO", AVRO, {"unit": "C"})
    assert as_json(broker, "schemas", "get", topic, "--version", "0")["data"] == AVRO
    assert [s["version"] for s in as_json(broker, "schemas", "get", topic, "--all-version")] == [0]
    assert as_json(broker, "schemas", "compatibility", topic, "-f", str(schema))["compatibility"] is True
    ok(broker, "schemas", "delete", topic)
    assert "Schema is deleted" in fails(broker, 3, "schemas", "get", topic)

    # Exit codes: the broker's reason in one line on stderr.
    reason = fails(broker, 3, "namespaces", "get-retention", "public/nowhere")
    assert reason.startswith("Error: ") and "HTTP 404" in reason and len(reason.strip().splitlines()) == 1
    fails(broker, 4, "tenants", "create", "public")
    assert "Missing argument" in fails(broker, 2, "namespaces", "create")
    assert "tenant/namespace" in fails(broker, 2, "namespaces", "policies", "no-slash")
    fails(broker, 2, "namespaces", "set-retention", "public/default", "-s", "lots", "-t", "1h")
    not_json = tmp_path / "bad.json"
    not_json.write_text("not json")
    fails(broker, 2, "schemas", "upload", topic, "-f", str(not_json))


def test_an_unreachable_admin_url_is_exit_code_6():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    done = magnetar("admin", "--admin-url", f"http://127.0.0.1:{closed}", "tenants", "list", timeout=30)
    assert done.returncode == 6, done.stderr
    assert "cannot reach the broker" in done.stderr and "Traceback" not in done.stderr
