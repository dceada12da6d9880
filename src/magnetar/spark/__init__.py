"""A PySpark data source for Magnetar topics: batch and Structured Streaming, read and write.

    import magnetar.spark
    magnetar.spark.register(spark)          # or rely on auto-registration of pyspark_magnetar
    df = (spark.readStream.format("magnetar")
          .option("service_url", "pulsar://127.0.0.1:6650")
          .option("admin_url", "http://127.0.0.1:8080")
          .option("topic", "sensors").load())

Offsets are the broker's continuous message index per topic partition. See docs/spark.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.spark.errors import (
    DeduplicationDisabledError,
    IndexNotEnabledError,
    InvalidOptionError,
    MagnetarSparkError,
    OffsetOutOfRangeError,
    ReadStalledError,
    UnknownTopicError,
)
from magnetar.spark.source import MagnetarDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DefaultSource = MagnetarDataSource  # the name Spark's auto-registration looks for


def register(spark: SparkSession) -> None:
    """Register the ``magnetar`` format with ``spark`` (auto-registration does it when installed)."""
    spark.dataSource.register(MagnetarDataSource)


__all__ = [
    "DeduplicationDisabledError",
    "DefaultSource",
    "IndexNotEnabledError",
    "InvalidOptionError",
    "MagnetarDataSource",
    "MagnetarSparkError",
    "OffsetOutOfRangeError",
    "ReadStalledError",
    "UnknownTopicError",
    "register",
]
