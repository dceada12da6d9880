"""The ``magnetar`` data source: Spark's entry point to the readers and writers."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from magnetar.spark.errors import InvalidOptionError, MagnetarSparkError
from magnetar.spark.options import ReadOptions, WriteOptions
from magnetar.spark.readers import MagnetarBatchReader, MagnetarStreamReader
from magnetar.spark.refused_stream import RefusedStreamReader
from magnetar.spark.schema import READ_SCHEMA
from magnetar.spark.sink import MagnetarBatchWriter, MagnetarStreamWriter


class MagnetarDataSource(DataSource):
    """``spark.read.format("magnetar")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self) -> StructType:
        # Spark asks for the schema at load(), for batch and stream reads alike (never for writes):
        # refusing bad options here fails the user's own load() line, before any query starts.
        ReadOptions.parse(self.options, streaming=None)
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_read_schema(schema)
        return MagnetarBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            _check_read_schema(schema)
            options = ReadOptions.parse(self.options, streaming=True)
        except MagnetarSparkError as exc:  # raised here, PySpark would report an UnboundLocalError
            return RefusedStreamReader(exc)
        return MagnetarStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> MagnetarBatchWriter:
        return MagnetarBatchWriter(WriteOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> MagnetarStreamWriter:
        return MagnetarStreamWriter(WriteOptions.parse(self.options), schema)


def _check_read_schema(schema: StructType) -> None:
    if schema != READ_SCHEMA:
        raise InvalidOptionError(
            f"the magnetar source has a fixed schema ({READ_SCHEMA.simpleString()}); do not give .schema(...)"
        )
