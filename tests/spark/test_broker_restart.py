"""A broker blip does not kill a streaming query: SIGKILL and restart on the same data and ports."""

from __future__ import annotations

import uuid

from magnetar.client import Client
from tests.spark.support import produce, source_options
from tests.waiting import eventually


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
        port, http_port = broker.port, broker.http_port
        broker.kill()  # SIGKILL: the planner's next trigger finds no broker
        broker.start(port=port, http_port=http_port)  # the same data directory and ports
        with Client(broker.service_url, operation_timeout_seconds=10) as client:
            produce(client, topic, [f"b{i}" for i in range(40)])
        eventually(lambda: len(seen) >= 80, timeout=60, what="the 40 messages sent after the restart")
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
    assert sorted(seen) == sorted([f"a{i}" for i in range(40)] + [f"b{i}" for i in range(40)])  # exactly once
