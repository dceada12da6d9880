"""A stream reader that only reports why the stream's options were refused.

PySpark's streaming source runner (4.3) calls ``DataSource.streamReader()`` inside a
``try`` whose ``finally`` calls ``reader.stop()``: when ``streamReader()`` raises, ``reader`` is
unbound and the user's last traceback line is an ``UnboundLocalError`` instead of the cause.
So ``streamReader()`` never raises; it returns this reader, which raises the connector's own
error from the first call Spark makes, where Spark reports it as it is.
"""

from __future__ import annotations

from typing import NoReturn

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from magnetar.spark.errors import MagnetarSparkError


class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Raises ``error`` from every call but ``stop()`` (which the runner calls on the way out)."""

    def __init__(self, error: MagnetarSparkError) -> None:
        self.error = error

    def _refuse(self) -> NoReturn:
        raise self.error

    def initialOffset(self) -> dict:
        self._refuse()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._refuse()

    def getDefaultReadLimit(self) -> ReadLimit:
        self._refuse()

    def prepareForTriggerAvailableNow(self) -> None:
        self._refuse()

    def reportLatestOffset(self) -> dict | None:
        self._refuse()

    def partitions(self, start: dict, end: dict) -> list:
        self._refuse()

    def read(self, partition: object) -> NoReturn:
        self._refuse()

    def commit(self, end: dict) -> None:
        self._refuse()

    def stop(self) -> None:
        """Nothing was opened."""
