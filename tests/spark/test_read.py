"""Batch reads: rows, offsets (the broker index), partitions, time, and the clear errors."""

from __future__ import annotations

import json
import re
import time

import pytest

from magnetar.client import MessageId
from tests.spark.support import admin, produce, read_back, source_options
from tests.waiting import eventually

N = 40


def load(spark, broker, **options):
    return spark.read.format("magnetar").options(**source_options(broker, **options)).load()


def test_batch_read_returns_every_message_once_with_its_index(spark, broker, client, topic):
    values = [f"v{i}" for i in range(N)]
    produce(client, topic, values, batching=True, batching_max_messages=7)
    expected = read_back(client, topic)

    rows = load(spark, broker, topic=topic).orderBy("offset").collect()

    assert [r.offset for r in rows] == list(range(N))
    assert [r.value for r in rows] == [v.encode() for v in values]
    first = rows[0]
    assert (first.key, first.topic, first.partition, first.properties) == ("k0", topic, -1, {"i": "0"})
    assert first.event_time.timestamp() == 1_700_000_000
    assert first.broker_publish_time is not None and first.publish_time is not None
    ids = [MessageId.deserialize(r.message_id) for r in rows]
    assert ids == [m.message_id() for m in expected]
    assert ids[1].batch_index() == 1  # batches are taken apart, each message with its own id and index

    # a bounded range, split into pieces of at most 4 indexes: still each message exactly once
    bounded = load(
        spark,
        broker,
        topic=topic,
        startingOffsets=json.dumps({topic: 10}),
        endingOffsets=json.dumps({topic: 30}),
        maxRecordsPerPartition=4,
    )
    assert bounded.rdd.getNumPartitions() == 5
    assert sorted(r.offset for r in bounded.collect()) == list(range(10, 30))


def test_partitioned_topic_is_read_one_spark_partition_per_topic_partition(spark, broker, client, topic):
    admin(broker.http_url, "PUT", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/partitions", 3)
    produce(client, topic, [f"p{i}" for i in range(30)], keys=30)  # routed by key hash
    df = load(spark, broker, topic=topic)
    assert df.rdd.getNumPartitions() == 3

    rows = df.collect()

    assert sorted(r.value for r in rows) == sorted(f"p{i}".encode() for i in range(30))
    assert {r.topic for r in rows} == {topic}
    for partition in {r.partition for r in rows}:
        mine = [r for r in rows if r.partition == partition]
        assert [r.offset for r in mine] == list(range(len(mine)))  # each partition has its own index
        assert len(read_back(client, f"{topic}-partition-{partition}")) == len(mine)
    # a short pattern means the namespace public/default
    by_pattern = load(spark, broker, topicsPattern=re.escape(topic.rsplit("/", 1)[1]))
    assert by_pattern.rdd.getNumPartitions() == 3 and by_pattern.count() == 30


def test_starting_timestamp_seeks_by_broker_time(spark, broker, client, topic):
    produce(client, topic, [f"old{i}" for i in range(10)])
    # Not waits for an event: the broker's clock must move past the old messages' millisecond,
    # and on past the boundary before the new ones.
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    produce(client, topic, [f"new{i}" for i in range(10)])

    rows = load(spark, broker, topic=topic, startingTimestamp=boundary_ms).orderBy("offset").collect()

    assert [r.offset for r in rows] == list(range(10, 20))
    assert [r.value for r in rows] == [f"new{i}".encode() for i in range(10)]
    assert load(spark, broker, topic=topic, startingTimestamp=boundary_ms + 3_600_000).count() == 0


def test_unknown_topic_is_a_clear_error(spark, broker, topic):
    with pytest.raises(Exception, match=r"UnknownTopicError.*does not exist"):
        load(spark, broker, topic=topic).collect()


def test_offsets_past_the_end_fail_or_are_skipped(spark, broker, client, topic):
    produce(client, topic, [f"v{i}" for i in range(5)])
    past = json.dumps({topic: 100})
    with pytest.raises(Exception, match=r"OffsetOutOfRangeError.*start index 100 .* past its end index 5"):
        load(spark, broker, topic=topic, startingOffsets=past).collect()
    assert load(spark, broker, topic=topic, startingOffsets=past, failOnDataLoss="false").count() == 0


def test_index_interceptor_off_is_a_clear_error(spark, broker_factory_session, topic):
    from magnetar.client import Client

    broker = broker_factory_session({"broker_entry_metadata_interceptors": ["broker_timestamp"]})
    with Client(broker.service_url) as client:
        produce(client, topic, ["a", "b"])
    with pytest.raises(Exception, match=r"IndexNotEnabledError.*broker_entry_metadata_interceptors"):
        load(spark, broker, topic=topic).collect()


def test_data_deleted_by_retention_fails_or_is_skipped(spark, broker_factory_session, topic):
    from magnetar.client import Client

    broker = broker_factory_session({"max_ledger_size_bytes": 1500, "retention_check_interval_seconds": 1})
    with Client(broker.service_url) as client:
        # no durable subscription: closed ledgers go at the next retention check
        produce(client, topic, [f"{i:03d}" + "x" * 100 for i in range(60)])
        first = eventually(
            lambda: read_back(client, topic)[0].index(),
            interval=0.3,
            what="retention deleting the closed ledgers",
        )
    from_zero = json.dumps({topic: 0})

    with pytest.raises(Exception, match=r"OffsetOutOfRangeError.*no longer retained"):
        load(spark, broker, topic=topic, startingOffsets=from_zero).collect()
    rows = load(spark, broker, topic=topic, startingOffsets=from_zero, failOnDataLoss="false").collect()
    assert len(rows) >= 60 - first and sorted(r.offset for r in rows)[-1] == 59


def test_chunked_messages_cut_by_ranges_are_read_once(spark, broker_factory_session, topic):
    from magnetar.client import Client

    broker = broker_factory_session({"max_message_size": 8192})
    big = [f"B{i}".encode() + bytes(20_000) for i in range(3)]
    with Client(broker.service_url) as client:
        producer = client.create_producer(topic, chunking_enabled=True)
        sent = []
        for i in range(3):
            sent += [producer.send(f"s{i}".encode()), producer.send(big[i])]
        producer.close()
    rows = load(spark, broker, topic=topic, maxRecordsPerPartition=2).collect()  # ranges end inside chunks

    assert sorted(r.value for r in rows) == sorted([f"s{i}".encode() for i in range(3)] + big)
