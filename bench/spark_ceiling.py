"""Spark's own ceiling for a Python data source: the connector's read schema, the case's rows and
value size, from batches built once in the task's memory (no broker, no socket, no decoding).

What ``spark.read.format("magnetar")`` could reach if reading cost nothing: the Python worker's
Arrow stream to the JVM, the JVM's conversion to rows and the aggregate. ``bench.spark_read``
runs it next to the real read, in the same session.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from magnetar.spark.schema import DEFAULT_BYTES_PER_BATCH, READ_SCHEMA, arrow_schema

NAME = "magnetar-bench-ceiling"


class CeilingSource(DataSource):
    """Options ``rows`` and ``size``: ``rows`` values of ``size`` bytes, in one partition."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return CeilingReader(int(self.options["rows"]), int(self.options["size"]))


class CeilingReader(DataSourceReader):
    def __init__(self, rows: int, size: int) -> None:
        self.rows = rows
        self.size = size

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        per_batch = max(1, min(10_000, DEFAULT_BYTES_PER_BATCH // self.size))  # as the connector cuts them
        full = _batch(per_batch, self.size)
        done = 0
        while done < self.rows:
            n = min(per_batch, self.rows - done)
            yield full if n == per_batch else _batch(n, self.size)
            done += n


def _batch(rows: int, size: int) -> pa.RecordBatch:
    """``rows`` rows whose value is ``size`` bytes and whose other columns are null."""
    schema = arrow_schema()
    value = b"x" * size
    columns = [
        pa.array([value] * rows, pa.binary()) if f.name == "value" else pa.nulls(rows, f.type) for f in schema
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
