"""A topic whose older ledgers are offloaded (tiered storage, the filesystem driver, their local
copies deleted): a batch read and a streaming read from earliest get every row once, in order,
with the offsets (the broker index) it was stored with."""

from __future__ import annotations

import uuid

import pytest

from magnetar.client import Client
from tests.spark.support import admin, produce, source_options
from tests.waiting import eventually

N = 120
VALUES = [f"frame-{i:03d}".ljust(150, ".") for i in range(N)]


@pytest.fixture(scope="module")
def offloading_broker(broker_factory_session, tmp_path_factory):
    store = tmp_path_factory.mktemp("offloaded")
    return broker_factory_session(
        {
            "max_ledger_size_bytes": 2048,  # a dozen messages a ledger
            "entry_cache_bytes": 0,  # every row read from the tiers
            "managed_ledger_offload_driver": "filesystem",
            "file_system_uri": f"file://{store}",
            "managed_ledger_offload_threshold_in_bytes": 0,
            "managed_ledger_offload_deletion_lag_ms": 0,
            "managed_ledger_offload_check_interval_seconds": 0.2,
        }
    )


def _offloaded(broker, topic: str) -> list[dict]:
    stats = admin(broker.http_url, "GET", f"/admin/v2/{topic.replace('://', '/')}/internalStats")
    closed = stats["ledgers"][:-1]
    assert len(closed) > 5 and all(ledger["offloaded"] and not ledger["local"] for ledger in closed), closed
    return closed


def test_batch_and_streaming_reads_of_an_offloaded_topic_give_every_row(spark, offloading_broker, topic):
    broker = offloading_broker
    with Client(broker.service_url, operation_timeout_seconds=10) as client:
        produce(client, topic, VALUES)
    eventually(lambda: _offloaded(broker, topic), what="the older ledgers offloaded, their local copies gone")
    expected = [(i, VALUES[i].encode()) for i in range(N)]

    batch = spark.read.format("magnetar").options(**source_options(broker, topic=topic)).load()
    assert [(r.offset, r.value) for r in batch.orderBy("offset").collect()] == expected

    name = f"offloaded_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("magnetar")
        .options(**source_options(broker, topic=topic, startingOffsets="earliest", maxOffsetsPerTrigger=50))
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the query did not finish"
    assert query.exception() is None
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [50, 50, 20]
    streamed = spark.sql(f"SELECT offset, value FROM {name} ORDER BY offset").collect()
    assert [(r.offset, r.value) for r in streamed] == expected
