"""Structured Streaming: restart from the checkpoint with a replayed micro-batch, exactly once."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.spark.support import admin, produce, read_back, source_options


@pytest.fixture
def eo_namespace(broker) -> str:
    """A namespace of its own with deduplication on, as the sink requires."""
    namespace = f"public/eo-{uuid.uuid4().hex[:6]}"
    admin(broker.http_url, "PUT", f"/admin/v2/namespaces/{namespace}", {})
    admin(broker.http_url, "POST", f"/admin/v2/namespaces/{namespace}/deduplication", True)
    return namespace


def run_available_now(spark, broker, source: str, sink: str, checkpoint: str):
    query = (
        spark.readStream.format("magnetar")
        .options(**source_options(broker, topic=source, startingOffsets="earliest", maxOffsetsPerTrigger=10))
        .load()
        .selectExpr("key", "value", "properties", "event_time")
        .writeStream.format("magnetar")
        .options(**source_options(broker, topic=sink))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the query did not finish"
    assert query.exception() is None
    return query


def batch_end_offsets(checkpoint: Path) -> dict[int, dict[str, int]]:
    """Each micro-batch's end offsets (next index by partition), from the checkpoint's offset log."""
    ends = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            ends[int(path.name)] = json.loads(path.read_text().splitlines()[-1])
    return ends


def test_restart_with_a_replayed_batch_is_exactly_once(spark, broker, client, topic, eo_namespace, tmp_path):
    admin(broker.http_url, "PUT", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/partitions", 2)
    sink = f"persistent://{eo_namespace}/sink-{uuid.uuid4().hex[:6]}"
    checkpoint = tmp_path / "checkpoint"
    produce(client, topic, [f"a{i}" for i in range(30)], keys=30)

    first = run_available_now(spark, broker, topic, sink, str(checkpoint))
    batches = [p["batchId"] for p in first.recentProgress if p["numInputRows"]]
    assert batches == [0, 1, 2]  # 30 messages, at most 10 per trigger

    # The process "dies" after the sink wrote batch 2 and before Spark recorded it as done:
    # on restart Spark runs batch 2 again with the same offsets, then the new data.
    for name in ("2", ".2.crc"):
        (checkpoint / "commits" / name).unlink()
    produce(client, topic, [f"b{i}" for i in range(20)], keys=20)
    second = run_available_now(spark, broker, topic, sink, str(checkpoint))
    replayed = [p for p in second.recentProgress if p["batchId"] == 2]
    assert replayed and replayed[0]["numInputRows"] == 10

    messages = read_back(client, sink)
    values = sorted(m.data().decode() for m in messages)
    assert values == sorted(
        [f"a{i}" for i in range(30)] + [f"b{i}" for i in range(20)]
    )  # no loss, no duplicate
    assert [m.index() for m in messages] == list(range(50))  # nothing was stored twice, not even briefly
    by_value = {m.data().decode(): m for m in messages}
    assert by_value["a7"].properties() == {"i": "7"} and by_value["a7"].event_timestamp() == 1_700_000_000_007

    # The committed offsets moved the durable subscription on each partition. Spark tells the
    # source a batch is done as it starts the next one: the last batch's offsets (the end of each
    # partition) are not committed yet, the one's before them are, and the backlog is the difference.
    ends = batch_end_offsets(checkpoint)
    last = max(ends)
    assert sum(ends[last].values()) == 50
    for partition in range(2):
        part = f"{topic}-partition-{partition}"
        stats = admin(
            broker.http_url, "GET", f"/admin/v2/persistent/{part.removeprefix('persistent://')}/stats"
        )
        (subscription,) = [
            s for name, s in stats["subscriptions"].items() if name.startswith("spark-magnetar-")
        ]
        assert subscription["durable"]
        assert subscription["msgBacklog"] == ends[last][part] - ends[last - 1][part], subscription


def test_sink_refuses_a_namespace_without_deduplication(spark, broker, client, topic, tmp_path):
    namespace = f"public/nodedup-{uuid.uuid4().hex[:6]}"
    admin(broker.http_url, "PUT", f"/admin/v2/namespaces/{namespace}", {})
    df = spark.createDataFrame([("k", b"v")], "key string, value binary")
    writer = (
        df.write.format("magnetar").mode("append").options(**source_options(broker, topic=f"{namespace}/out"))
    )
    with pytest.raises(Exception, match=r"DeduplicationDisabledError.*deduplication is not enabled"):
        writer.save()

    writer.option("enableDeduplication", "true").save()  # the sink may turn it on itself
    assert admin(broker.http_url, "GET", f"/admin/v2/namespaces/{namespace}/deduplication") is True
    assert [m.data() for m in read_back(client, f"persistent://{namespace}/out")] == [b"v"]

    # the target of each row from a topic column; a string value is sent as UTF-8
    rows = [(f"{namespace}/{t}", f"{t}{i}", {"n": str(i)}) for t in "ab" for i in range(3)]
    by_column = spark.createDataFrame(rows, "topic string, value string, properties map<string,string>")
    by_column.write.format("magnetar").mode("append").options(**source_options(broker)).save()
    for t in "ab":
        got = [(m.data(), m.properties()) for m in read_back(client, f"persistent://{namespace}/{t}")]
        assert got == [(f"{t}{i}".encode(), {"n": str(i)}) for i in range(3)]
