"""Kafka-source parity in real Spark: reads bounded by broker time; minOffsetsPerTrigger, maxTriggerDelay."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime

from magnetar.spark.lag import source_lag
from tests.spark.support import produce, source_options
from tests.waiting import eventually


def load(spark, broker, **options):
    return spark.read.format("magnetar").options(**source_options(broker, **options)).load()


def offsets(df) -> list[int]:
    return sorted(r.offset for r in df.select("offset").collect())


def test_reads_bounded_by_broker_time(spark, broker, client, topic):
    boundaries = []
    for part in ("old", "mid", "new"):
        if part != "old":
            # Not waits for an event: the broker's clock must move past the previous messages'
            # millisecond, and on past the boundary before the next ones.
            time.sleep(0.05)
            boundaries.append(int(time.time() * 1000))
            time.sleep(0.05)
        produce(client, topic, [f"{part}{i}" for i in range(10)])
    b1, b2 = boundaries

    between = load(spark, broker, topic=topic, startingTimestamp=b1, endingTimestamp=b2)
    assert offsets(between) == list(range(10, 20))  # ends before the first message at or after b2
    assert offsets(load(spark, broker, topic=topic, endingTimestamp=b1)) == list(range(10))
    by_partition = {
        "startingOffsetsByTimestamp": json.dumps({topic: b2}),
        "endingOffsetsByTimestamp": json.dumps({topic: b2 + 3_600_000}),  # none that late: the end
    }
    assert offsets(load(spark, broker, topic=topic, **by_partition)) == list(range(20, 30))


def _ms(progress) -> float:
    return datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp() * 1000


def test_min_offsets_per_trigger_waits_for_the_minimum_or_the_delay(spark, broker, client, topic, tmp_path):
    delay_ms = 8_000
    name = f"minoffsets_{uuid.uuid4().hex[:8]}"
    produce(client, topic, ["first"])
    query = (
        spark.readStream.format("magnetar")
        .options(
            **source_options(
                broker,
                topic=topic,
                startingOffsets="earliest",
                minOffsetsPerTrigger=5,
                maxTriggerDelay=f"{delay_ms}ms",
            )
        )
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:

        def batch_of(rows: int):
            def check():
                found = [p for p in query.recentProgress if p.numInputRows == rows]
                assert query.exception() is None, query.exception()
                return found[-1] if found else None

            return check

        first = eventually(batch_of(1), timeout=60, what="the first trigger reads at once")
        produce(client, topic, [f"few{i}" for i in range(3)])
        few = eventually(batch_of(3), timeout=30, what="3 offsets (< 5) read once maxTriggerDelay passed")
        # A trigger is let through by the delay only: no earlier than delay_ms after the last one
        # (the slack covers the time from a trigger's start to its latestOffset call).
        assert _ms(few) - _ms(first) >= delay_ms - 500

        produce(client, topic, [f"many{i}" for i in range(5)])
        many = eventually(batch_of(5), timeout=30, what="5 offsets read at once")
        assert _ms(many) - _ms(few) < delay_ms  # the minimum let it through, not the delay
        assert spark.sql(f"select count(*) from {name}").collect()[0][0] == 9

        source = many.sources[0]
        assert json.loads(source.latestOffset) == json.loads(source.endOffset)  # reportLatestOffset
        assert source_lag(source) == {
            "minOffsetsBehindLatest": "0",
            "maxOffsetsBehindLatest": "0",
            "avgOffsetsBehindLatest": "0.0",
        }
        # Measured on pyspark 4.3: a Python source's progress carries no custom metrics
        # (PythonMicroBatchStream does not implement ReportsSourceMetrics; docs/spark.md).
        assert not source.metrics
    finally:
        query.stop()
