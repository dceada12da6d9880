"""``magnetar admin topics offload`` / ``offload-status`` and a namespace's offload threshold and
deletion lag, as a user runs them against a real broker offloading to a directory."""

from __future__ import annotations

import json

import pytest

from tests.offload.conftest import objects

from .conftest import admin
from .conftest import admin_ok as ok

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def test_offload_keeping_a_size_then_wait_for_its_status(broker_factory, client_factory, topic, tmp_path):
    store = tmp_path / "offloaded"
    broker = broker_factory(
        {
            "max_ledger_size_bytes": 2048,
            "managed_ledger_offload_driver": "filesystem",
            "file_system_uri": str(store),
        }
    )
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(f"{i}".encode().ljust(200, b"."))
    assert (
        ok(broker, "topics", "offload-status", topic)
        == f"Offload has not been run for {topic} since broker startup\n"
    )
    assert ok(broker, "topics", "offload", "-s", "1G", topic) == "Nothing to offload\n"
    said = ok(broker, "topics", "offload", "--size-threshold", "4K", topic)
    assert said.startswith(f"Offload triggered for {topic} for messages before ") and said.endswith(":0:-1\n")
    assert ok(broker, "topics", "offload-status", "-w", topic) == "Offload was a success\n"
    status = json.loads(ok(broker, "topics", "offload-status", topic, "--json"))
    assert status["status"] == "SUCCESS" and status["lastError"] == ""
    kept = json.loads(ok(broker, "topics", "stats-internal", topic, "--json"))["ledgers"]
    local = sum(ledger["size"] for ledger in kept if not ledger["offloaded"])
    assert objects(store) and all(ledger["offloaded"] for ledger in kept[: len(objects(store))])
    assert local <= 4096 + kept[-1]["size"]


def test_namespace_offload_threshold_and_deletion_lag(broker):
    said = ok(broker, "namespaces", "get-offload-threshold", "public/default")
    assert said == "offloadThresholdInBytes: -1\noffloadThresholdInSeconds: -1\n"
    ok(broker, "namespaces", "set-offload-threshold", "--size", "10M", "--time", "2h", "public/default")
    said = ok(broker, "namespaces", "get-offload-threshold", "public/default", "--json")
    assert json.loads(said) == {
        "offloadThresholdInBytes": 10 * 1024 * 1024,
        "offloadThresholdInSeconds": 7200,
    }
    ok(broker, "namespaces", "set-offload-threshold", "-s", "1G", "public/default")  # no -t: not by age
    assert json.loads(ok(broker, "namespaces", "get-offload-threshold", "public/default", "--json")) == {
        "offloadThresholdInBytes": 1024**3,
        "offloadThresholdInSeconds": -1,
    }
    ok(broker, "namespaces", "set-offload-deletion-lag", "--lag", "1h", "public/default")
    assert ok(broker, "namespaces", "get-offload-deletion-lag", "public/default") == "3600000\n"
    ok(broker, "namespaces", "clear-offload-deletion-lag", "public/default")
    refused = admin(broker, "namespaces", "set-offload-threshold", "--size", "lots", "public/default")
    assert refused.returncode == 2
