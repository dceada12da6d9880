"""A broker blip does not kill a streaming query: SIGKILL and restart on the same data and ports."""

from __future__ import annotations

import uuid

from magnetar.client import Client
from tests.spark.support import admin, produce, read_back, source_options
from tests.waiting import eventually


def restart(broker) -> None:
    port, http_port = broker.port, broker.http_port
    broker.kill()  # SIGKILL: nothing is flushed or closed
    broker.start(port=port, http_port=http_port)  # the same data directory and ports


def test_stream_survives_a_broker_kill_and_restart_exactly_once(spark, broker_factory_session, tmp_path):
    broker = broker_factory_session()  # its own: the session's broker stays up for the other tests
    topic = f"persistent://public/default/blip-{uuid.uuid4().hex[:8]}"
    seen: list[str] = []

    def collect(batch, batch_id: int) -> None:  # foreachBatch runs on the driver
        seen.extend(row.value.decode() for row in batch.select("value").collect())

    with Client(broker.service_url, operation_timeout_seconds=10) as client:
        produce(client, topic, [f"a{i}" for i in range(40)])
    query = (
        spark.readStream.format("magnetar")
        .options(**source_options(broker, topic=topic, startingOffsets="earliest", retryTimeoutMs=60_000))
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        eventually(lambda: len(seen) >= 40, timeout=60, what="the first 40 messages")
        restart(broker)  # the planner's next trigger finds no broker
        with Client(broker.service_url, operation_timeout_seconds=10) as client:
            produce(client, topic, [f"b{i}" for i in range(40)])
        eventually(lambda: len(seen) >= 80, timeout=60, what="the 40 messages sent after the restart")
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
    assert sorted(seen) == sorted([f"a{i}" for i in range(40)] + [f"b{i}" for i in range(40)])  # exactly once


def test_sink_survives_a_broker_kill_and_restart_exactly_once(spark, broker_factory_session, tmp_path):
    broker = broker_factory_session()
    tag = uuid.uuid4().hex[:8]
    source = f"persistent://public/default/sink-source-{tag}"
    sink = f"persistent://public/eo-{tag}/sink-{tag}"  # a namespace with deduplication on, as the sink needs
    admin(broker.http_url, "PUT", f"/admin/v2/namespaces/public/eo-{tag}", {})
    admin(broker.http_url, "POST", f"/admin/v2/namespaces/public/eo-{tag}/deduplication", True)
    admin(broker.http_url, "PUT", f"/admin/v2/persistent/public/default/sink-source-{tag}/partitions", 2)
    checkpoint = str(tmp_path / "checkpoint")
    with Client(broker.service_url, operation_timeout_seconds=10) as client:
        produce(client, source, [f"a{i}" for i in range(30)])  # keys k0, k1, k2

    def start(**trigger):
        read = source_options(broker, topic=source, startingOffsets="earliest", maxOffsetsPerTrigger=10)
        return (
            spark.readStream.format("magnetar")
            .options(**read)
            .load()
            .selectExpr("key", "value")
            .writeStream.format("magnetar")
            .options(**source_options(broker, topic=sink, retryTimeoutMs=60_000))
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )

    def rows(query) -> int:
        return sum(p["numInputRows"] for p in query.recentProgress)

    first = start(availableNow=True)
    assert first.awaitTermination(120) and first.exception() is None
    assert [p["batchId"] for p in first.recentProgress if p["numInputRows"]] == [0, 1, 2]
    # The driver dies after the sink stored batch 2 and before Spark recorded it, then the broker is
    # SIGKILLed: the replay of batch 2 meets a broker that must still know what those producers stored.
    for name in ("2", ".2.crc"):
        (tmp_path / "checkpoint" / "commits" / name).unlink()
    restart(broker)
    second = start(processingTime="200 milliseconds")
    try:
        eventually(lambda: rows(second) >= 10, timeout=60, what="the replay of batch 2")
        restart(broker)  # in the middle of the stream: the planner's next trigger finds no broker
        with Client(broker.service_url, operation_timeout_seconds=10) as client:
            produce(client, source, [f"b{i}" for i in range(30)])
        eventually(lambda: rows(second) >= 40, timeout=60, what="the 30 messages sent after the restart")
        assert second.isActive and second.exception() is None
    finally:
        second.stop()
    assert [p["numInputRows"] for p in second.recentProgress if p["batchId"] == 2] == [10]  # replayed

    with Client(broker.service_url, operation_timeout_seconds=10) as client:
        messages = read_back(client, sink)
    sent = [f"a{i}" for i in range(30)] + [f"b{i}" for i in range(30)]
    assert sorted(m.data().decode() for m in messages) == sorted(sent)  # no loss, no duplicate
    assert [m.index() for m in messages] == list(range(60))  # nothing stored twice, not even briefly
    for k in range(3):  # a key's rows come from one source partition and one task: in order
        assert [m.data().decode() for m in messages if m.partition_key() == f"k{k}"] == [
            v for v in sent if int(v[1:]) % 3 == k
        ]
