"""Large values read with the default options: batches bounded by bytes (bytesPerBatch)."""

from __future__ import annotations

import zlib

from tests.spark.support import source_options

MB = 1024 * 1024


def test_one_mb_values_are_read_with_the_defaults(spark, broker, client, topic):
    from pyspark.sql import functions as F

    values = [i.to_bytes(4, "big") * (MB // 4) for i in range(300)]
    producer = client.create_producer(topic, batching_enabled=False)
    for value in values:
        producer.send_async(value, None)
    producer.flush()
    producer.close()

    df = spark.read.format("magnetar").options(**source_options(broker, topic=topic)).load()
    rows = df.select("offset", F.length("value").alias("size"), F.crc32("value").alias("crc")).collect()

    assert sorted((r.offset, r.size, r.crc) for r in rows) == [
        (i, MB, zlib.crc32(value)) for i, value in enumerate(values)
    ]
