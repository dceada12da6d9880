"""Spark registers every installed module named ``pyspark_*`` that has a ``DefaultSource``:
this one makes ``format("magnetar")`` work without ``magnetar.spark.register(spark)``."""

from magnetar.spark import DefaultSource

__all__ = ["DefaultSource"]
