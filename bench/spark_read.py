"""Benchmark: the Spark connector's read speed next to the official client's raw Reader drain.

Starts one Magnetar broker (``fsync_policy = "never"``, retention unlimited), fills one topic per
case with the official client (100 B messages batched; 100 KB messages one per entry), then on the
same broker and topic, for each case: drains it with the official client's ``Reader`` from the
earliest message (msg/s, MB/s), reads it with ``read_range`` in this process (the code a Spark task
runs, without Spark), and reads it with ``spark.read.format("magnetar")`` in a local[N] session
(rows/s, MB/s; the count and the summed value lengths are checked), and, as Spark's own ceiling,
the same query over a Python data source that yields the same rows from batches built once in
memory (``bench/spark_ceiling.py``: no broker, no socket, no decoding). Spark's fixed costs
(session start, the first job's Python workers) are paid by a warm-up read before any timing.
Prints one JSON object.

    .venv/bin/python -m bench.spark_read                         # 1M x 100 B and 20k x 100 KB
    .venv/bin/python -m bench.spark_read --small 200000 --large 5000 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pulsar

from bench.machine import describe
from bench.output import emit
from bench.workload import log_client_to, make_client
from magnetar.broker_process import BrokerProcess
from magnetar.spark.range_read import ReadTask, read_range

MB = 1_000_000


@dataclass(frozen=True)
class Case:
    name: str
    count: int
    size: int
    batched: bool

    @property
    def topic(self) -> str:
        return f"persistent://public/default/bench-spark-read-{self.name}"

    @property
    def megabytes(self) -> float:
        return self.count * self.size / MB


def fill(client: pulsar.Client, case: Case) -> float:
    """Produce the case's messages; seconds taken."""
    producer = client.create_producer(
        case.topic,
        batching_enabled=case.batched,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=5,
        max_pending_messages=10_000,
        block_if_queue_full=True,
    )
    payload = b"x" * case.size
    start = time.perf_counter()
    for _ in range(case.count):
        producer.send_async(payload, None)
    producer.flush()
    producer.close()
    return time.perf_counter() - start


def raw_drain(client: pulsar.Client, case: Case) -> float:
    """Seconds for the official Reader to take every message of the topic from the earliest."""
    reader = client.create_reader(case.topic, pulsar.MessageId.earliest, receiver_queue_size=1000)
    start = time.perf_counter()
    for _ in range(case.count):
        reader.read_next(30_000)
    seconds = time.perf_counter() - start
    reader.close()
    return seconds


def range_read(broker: BrokerProcess, case: Case) -> float:
    """Seconds for ``read_range`` (a Spark task's code) to turn the whole topic into record batches."""
    task = ReadTask(case.topic, 0, case.count, broker.service_url, broker.http_url)
    start = time.perf_counter()
    rows = sum(batch.num_rows for batch in read_range(task))
    seconds = time.perf_counter() - start
    assert rows == case.count, f"read_range gave {rows} rows of {case.count}"
    return seconds


def spark_read(spark, broker: BrokerProcess, case: Case) -> float:
    """Seconds for a ``spark.read`` of the whole topic, counted and value lengths summed."""
    from pyspark.sql import functions as F

    options = {"service_url": broker.service_url, "admin_url": broker.http_url, "topic": case.topic}
    start = time.perf_counter()
    df = spark.read.format("magnetar").options(**options).load()
    (row,) = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()
    seconds = time.perf_counter() - start
    assert (row.n, row.bytes) == (case.count, case.count * case.size), f"spark read {row}"
    return seconds


def spark_ceiling(spark, case: Case) -> float:
    """Seconds for the same query over ``CeilingSource``: Spark's part of ``spark_read`` alone."""
    from pyspark.sql import functions as F

    from bench.spark_ceiling import NAME

    start = time.perf_counter()
    df = spark.read.format(NAME).options(rows=str(case.count), size=str(case.size)).load()
    (row,) = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()
    seconds = time.perf_counter() - start
    assert (row.n, row.bytes) == (case.count, case.count * case.size), f"ceiling read {row}"
    return seconds


def session(cores: int, local_dir: Path):
    from pyspark.sql import SparkSession

    import magnetar.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("magnetar-bench-spark-read")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.local.dir", str(local_dir))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(spark)
    from pyspark import cloudpickle

    import bench.spark_ceiling

    cloudpickle.register_pickle_by_value(bench.spark_ceiling)  # the workers need not import bench
    spark.dataSource.register(bench.spark_ceiling.CeilingSource)
    return spark


def rates(case: Case, seconds: list[float]) -> dict[str, float]:
    median = statistics.median(seconds)
    return {
        "seconds": round(median, 3),
        "rows_s": round(case.count / median),
        "mb_s": round(case.megabytes / median, 1),
        "runs_s": [round(s, 3) for s in seconds],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spark_read", description=__doc__.split("\n")[0])
    p.add_argument("--small", type=int, default=1_000_000, help="100 B messages (batched)")
    p.add_argument("--large", type=int, default=20_000, help="100 KB messages (one per entry)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs of each reader (the median is shown)")
    p.add_argument("--cores", type=int, default=2, help="local[N]")
    p.add_argument(
        "--skip", default="", help="comma list of readers to leave out: raw, range_read, spark, ceiling"
    )
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    cases = [Case("100B", args.small, 100, True), Case("100KB", args.large, 100_000, False)]
    cases = [c for c in cases if c.count > 0]
    results: dict[str, object] = {}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-spark-") as tmp:
        work = Path(tmp)
        log_client_to(work / "client.log")
        # retention off: with no subscription on them, the topics' closed ledgers (128 MB) count
        # as consumed and the retention check (every 60 s) would delete them between the readers
        keep = {"retention_time_seconds": -1, "retention_size_bytes": -1}
        broker = BrokerProcess(work, {"fsync_policy": "never", **keep}).start()
        spark = None
        try:
            client = make_client(broker.service_url)
            fills = {c.name: fill(client, c) for c in cases}
            if "spark" not in skip:
                spark = session(args.cores, work / "spark")
                warm = Case("warm", 1000, 100, True)
                fill(client, warm)
                spark_read(spark, broker, warm)  # session and Python workers started before timing
                if "ceiling" not in skip:
                    spark_ceiling(spark, warm)
            for case in cases:
                runs: dict[str, list[float]] = {"raw": [], "range_read": [], "spark": [], "spark_ceiling": []}
                for _ in range(args.repeat):
                    if "raw" not in skip:
                        runs["raw"].append(raw_drain(client, case))
                    if "range_read" not in skip:
                        runs["range_read"].append(range_read(broker, case))
                    if spark is not None:
                        runs["spark"].append(spark_read(spark, broker, case))
                        if "ceiling" not in skip:
                            runs["spark_ceiling"].append(spark_ceiling(spark, case))
                figures = {name: rates(case, s) for name, s in runs.items() if s}
                if "raw" in figures and "spark" in figures:
                    share = figures["spark"]["mb_s"] / figures["raw"]["mb_s"]
                    figures["spark_over_raw_mb_s"] = round(share, 2)
                if "spark_ceiling" in figures and "spark" in figures:
                    share = figures["spark"]["mb_s"] / figures["spark_ceiling"]["mb_s"]
                    figures["spark_over_ceiling_mb_s"] = round(share, 2)
                if "spark_ceiling" in figures and "raw" in figures:
                    share = figures["spark_ceiling"]["mb_s"] / figures["raw"]["mb_s"]
                    figures["ceiling_over_raw_mb_s"] = round(share, 2)
                results[case.name] = {
                    "messages": case.count,
                    "size": case.size,
                    "fill_s": round(fills[case.name], 2),
                    **figures,
                }
            client.close()
        finally:
            if spark is not None:
                spark.stop()
            broker.stop()
    load = {"before": load_before, "after": os.getloadavg()[0]}  # 1-minute load: the machine is shared
    emit({"machine": describe(), "load_1min": load, "cores": args.cores, **results}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
