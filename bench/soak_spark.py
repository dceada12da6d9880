"""The soak's Spark pipeline, in a process of its own: a stream from one topic into another.

``python -m bench.soak_spark SERVICE_URL ADMIN_URL SOURCE SINK CHECKPOINT STOP_FILE`` reads
``SOURCE`` with Magnetar's connector and writes every row to ``SINK`` with deduplication on, as a
user's Structured Streaming job would, until ``STOP_FILE`` exists. A broker killed meanwhile is
the connector's to ride out (its retry policy, docs/spark.md "Broker restarts"); if the query
fails anyway, it is started again from its checkpoint, and each such start is printed as a line
``restarted: <error>`` for the soak to count.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

TRIGGER = "5 seconds"


def main(argv: list[str]) -> int:
    service_url, admin_url, source, sink, checkpoint, stop_file = argv
    from pyspark.sql import SparkSession

    import magnetar.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("magnetar-soak")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(spark)
    urls = {"service_url": service_url, "admin_url": admin_url}
    print("started", flush=True)
    while not Path(stop_file).exists():
        query = (
            spark.readStream.format("magnetar")
            .options(**urls, topic=source, startingOffsets="earliest")
            .load()
            .select("key", "value")
            .writeStream.format("magnetar")
            .options(**urls, topic=sink, enableDeduplication="true", checkpointLocation=checkpoint)
            .trigger(processingTime=TRIGGER)
            .start()
        )
        while not Path(stop_file).exists() and query.isActive:
            query.awaitTermination(2)
        if query.isActive:
            query.stop()
            break
        print(f"restarted: {str(query.exception()).splitlines()[0][:300]}", flush=True)
        time.sleep(1)  # the next start reads the checkpoint again
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
