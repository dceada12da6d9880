"""``magnetar admin clusters create|update|delete``, ``namespaces set-clusters|get-clusters`` and
``topics set|get|remove-replication-clusters`` run as a user runs them, against a real broker."""

from __future__ import annotations

import json

import pytest

from .conftest import admin
from .conftest import admin_ok as ok

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: a CLI process per call, two brokers

TOPIC = "persistent://public/default/readings"


def as_json(broker, *args: str):
    return json.loads(ok(broker, *args, "--json"))


def test_replication_verbs_round_trip(broker):
    ok(
        broker,
        "clusters",
        "create",
        "west",
        "--url",
        "http://west:8080",
        "--broker-url",
        "pulsar://west:6650",
        "--auth-plugin",
        "token",
        "--auth-parameters",
        "token:x",
        "--tls-enable",
    )
    assert as_json(broker, "clusters", "get", "west") == {
        "serviceUrl": "http://west:8080",
        "brokerServiceUrl": "pulsar://west:6650",
        "authenticationPlugin": "token",
        "authenticationParameters": "token:x",
        "brokerClientTlsEnabled": True,
    }
    assert ok(broker, "clusters", "list") == "standalone\nwest\n"
    ok(broker, "clusters", "update", "west", "--url-secure", "https://west:8443")
    assert as_json(broker, "clusters", "get", "west") == {"serviceUrlTls": "https://west:8443"}
    bad = admin(broker, "clusters", "create", "north", "--url", "ftp://north")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr

    ok(broker, "tenants", "update", "public", "--allowed-clusters", "standalone,west")
    ok(broker, "namespaces", "set-clusters", "public/default", "--clusters", "standalone,west")
    assert ok(broker, "namespaces", "get-clusters", "public/default") == "standalone\nwest\n"
    refused = admin(broker, "clusters", "delete", "west")
    assert refused.returncode != 0 and "public/default" in refused.stderr

    ok(broker, "topics", "set-replication-clusters", TOPIC, "-c", "west")
    assert as_json(broker, "topics", "get-replication-clusters", TOPIC) == ["west"]
    ok(broker, "topics", "remove-replication-clusters", TOPIC)
    assert as_json(broker, "topics", "get-replication-clusters", TOPIC) is None
    assert as_json(broker, "topics", "get-replication-clusters", TOPIC, "--applied") == ["standalone", "west"]

    ok(broker, "namespaces", "set-clusters", "public/default", "-c", "standalone")
    ok(broker, "clusters", "delete", "west")
    assert ok(broker, "clusters", "list") == "standalone\n"
