"""``magnetar admin topics compact`` and ``compaction-status`` as a user runs them, against a real broker."""

from __future__ import annotations

import json

import pytest

from .conftest import admin
from .conftest import admin_ok as ok


@pytest.mark.interop
def test_compact_then_wait_for_its_status(broker, client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(b"v", partition_key=f"k{i % 3}")
    assert ok(broker, "topics", "compaction-status", topic) == "Compaction has not been run\n"
    done = admin(broker, "topics", "compact", topic)
    assert done.returncode == 0 and f"Topic compaction requested for {topic}" in done.stderr
    assert ok(broker, "topics", "compaction-status", topic, "-w") == "Compaction was a success\n"
    status = json.loads(ok(broker, "topics", "compaction-status", topic, "--json"))
    assert status == {"status": "SUCCESS", "lastError": ""}
    missing = admin(broker, "topics", "compact", topic + "-none")
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
