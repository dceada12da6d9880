"""``pulsar.reader.readCompacted`` (Pulsar's Spark connector's name): a batch read of the compacted
view is the latest value of every key, with the original offsets; what follows the horizon comes
after it; ledgers retention deleted after compaction are still read through the view; a stream
starts from the view."""

from __future__ import annotations

import json
import uuid

import pytest

from magnetar.client import Client
from magnetar.client.admin import AdminClient
from magnetar.spark.errors import InvalidOptionError
from magnetar.spark.options import ReadOptions
from tests.spark.support import produce, read_back, source_options
from tests.waiting import eventually

COMPACTED = {"pulsar.reader.readCompacted": "true"}


def _compact(broker, topic: str, partitions: int = 0) -> None:
    admin = AdminClient(broker.http_url)
    admin.topics.trigger_compaction(topic)
    for name in [f"{topic}-partition-{i}" for i in range(partitions)] if partitions else [topic]:

        def over(name=name):
            status = admin.topics.compaction_status(name)
            assert status["status"] in ("SUCCESS", "ERROR"), status
            return status

        assert eventually(over, what=f"the compaction of {name}")["status"] == "SUCCESS"


def _load(spark, broker, **options):
    return spark.read.format("magnetar").options(**source_options(broker, **options)).load()


def test_the_option_is_a_flag_named_as_pulsars_connector_names_it():
    assert ReadOptions.parse({"topic": "a"}, streaming=False).read_compacted is False
    lower_cased = {"topic": "a", "pulsar.reader.readcompacted": "true"}  # as Spark hands it over
    assert ReadOptions.parse(lower_cased, streaming=True).read_compacted
    with pytest.raises(InvalidOptionError, match=r"pulsar\.reader\.readCompacted must be true or false"):
        ReadOptions.parse({"topic": "a", "pulsar.reader.readCompacted": "sometimes"}, streaming=False)


def test_a_batch_read_of_the_compacted_view_is_the_latest_value_of_every_key(spark, broker, client, topic):
    produce(client, topic, [f"v{i}" for i in range(60)], batching=True, batching_max_messages=7, keys=6)
    producer = client.create_producer(topic)
    producer.send(b"", partition_key="k0")  # the topic's last message, a tombstone: compacted out
    indexes = {m.partition_key(): m.index() for m in read_back(client, topic)[:60]}
    _compact(broker, topic)

    rows = _load(spark, broker, topic=topic, **COMPACTED).orderBy("offset").collect()
    assert [(r.key, r.value) for r in rows] == [(f"k{i}", f"v{54 + i}".encode()) for i in range(1, 6)]
    assert [r.offset for r in rows] == [indexes[f"k{i}"] for i in range(1, 6)]  # the original indexes
    assert _load(spark, broker, topic=topic).count() == 61  # without the option: every message

    producer.send(b"after", partition_key="k1")  # after the horizon: read from the topic
    producer.send(b"again", partition_key="k1")
    rows = _load(spark, broker, topic=topic, **COMPACTED).orderBy("offset").collect()
    assert [(r.key, r.value) for r in rows][-3:] == [("k5", b"v59"), ("k1", b"after"), ("k1", b"again")]
    assert len(rows) == 7


@pytest.mark.slow
def test_ledgers_deleted_after_compaction_are_read_through_the_view(spark, broker_factory_session):
    topic = f"persistent://public/default/compacted-retention-t{uuid.uuid4().hex[:8]}"
    broker = broker_factory_session({"max_ledger_size_bytes": 1500, "retention_check_interval_seconds": 1})
    admin = AdminClient(broker.http_url)
    admin.topics.create_partitioned_topic(topic, 2)
    with Client(broker.service_url) as client:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(8):
            producer.send(f"first {i}".encode(), partition_key=f"k{i}")
        for i in range(60):  # then one busy key, filling ledger after ledger
            producer.send(f"{i:03d}".encode() + b"x" * 100, partition_key="busy")
        busy = next(p for p in client.get_topic_partitions(topic) if len(read_back(client, p)) > 60)
        early_keys = {m.partition_key() for m in read_back(client, busy)} - {"busy"}
        assert early_keys, "no early key shares the busy key's partition"
        _compact(broker, topic, partitions=2)
        # the __compaction cursor at the horizon holds nothing back: retention deletes the busy
        # partition's closed ledgers, and its early keys' messages with them
        eventually(
            lambda: read_back(client, busy)[0].partition_key() == "busy",
            interval=0.3,
            what="retention deleting the compacted ledgers",
        )
    rows = _load(spark, broker, topic=topic, **COMPACTED).collect()
    assert sorted((r.key, r.value[:8]) for r in rows) == [("busy", b"059" + b"x" * 5)] + [
        (f"k{i}", f"first {i}".encode()) for i in range(8)
    ]
    with pytest.raises(Exception, match=r"OffsetOutOfRangeError.*no longer retained"):
        from_zero = json.dumps({f"{topic}-partition-{i}": 0 for i in range(2)})
        _load(spark, broker, topic=topic, startingOffsets=from_zero).collect()


def test_a_stream_starts_from_the_compacted_view(spark, broker, client, topic, tmp_path):
    produce(client, topic, [f"v{i}" for i in range(30)], keys=3)
    _compact(broker, topic)
    client.create_producer(topic).send(b"new", partition_key="k9")
    name = f"compacted_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("magnetar")
        .options(**source_options(broker, topic=topic, startingOffsets="earliest", **COMPACTED))
        .load()
        .selectExpr("key", "cast(value as string) as value", "offset")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the query did not finish"
    assert query.exception() is None
    rows = spark.sql(f"select key, value from {name} order by offset").collect()
    assert [(r.key, r.value) for r in rows] == [("k0", "v27"), ("k1", "v28"), ("k2", "v29"), ("k9", "new")]
