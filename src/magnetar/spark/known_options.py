"""The options each side knows, and the check that refuses any other.

Spark passes every ``.option(...)`` through unchecked, so a misspelt name (``maxOffsetPerTrigger``)
would silently fall back to a default that reads everything. Each side has one table here;
adding an option is one line in it (and its parsing in ``options.py``). Names are compared
lower-cased, as Spark hands them over.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from magnetar.spark.errors import InvalidOptionError
from magnetar.spark.security import HOSTNAME, INSECURE, PARAMS, PLUGIN, TRUST

#: Pulsar's Spark connector's name: its ``pulsar.reader.`` prefix and the reader's ``readCompacted``.
READ_COMPACTED = "pulsar.reader.readCompacted"

# Options Spark itself adds: load(path) / save(path), the stream sink's checkpoint and query name.
SPARK_PASSED = ("path", "paths", "checkpointLocation", "queryName")

CONNECTION = (
    "service_url",
    "serviceUrl",
    "admin_url",
    "adminUrl",
    "admin.url",
    "token",
    PLUGIN,
    PARAMS,
    TRUST,
    INSECURE,
    HOSTNAME,
)

SOURCE_OPTIONS = (
    *SPARK_PASSED,
    *CONNECTION,
    "topic",
    "topics",
    "topicsPattern",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "subscriptionName",
    "maxRecordsPerPartition",
    "minPartitions",
    "readTimeoutMs",
    "recordsPerBatch",
    "bytesPerBatch",
    "retryTimeoutMs",
    READ_COMPACTED,
)

SINK_OPTIONS = (
    *SPARK_PASSED,
    *CONNECTION,
    "topic",
    "producerNamePrefix",
    "enableDeduplication",
    "sortBeforeWrite",
    "chunkingEnabled",
    "sendTimeoutMs",
    "retryTimeoutMs",
)

# Spark Kafka source names a user may carry over, and what to use instead.
KAFKA_NAMES = {
    "kafka.bootstrap.servers": "service_url (and admin_url)",
    "subscribe": "topics",
    "subscribepattern": "topicsPattern",
    "assign": 'topics (a topic partition is the topic "<name>-partition-<n>")',
}


def unknown_option_message(name: str, known: Iterable[str], side: str) -> str:
    """What to tell a user who gave ``name``: the nearest known name, or the Kafka equivalent."""
    by_lower = {k.lower(): k for k in known}
    hint = KAFKA_NAMES.get(name.lower())
    if hint is None:
        nearest = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
        hint = by_lower[nearest[0]] if nearest else None
    if hint is None and name.lower().startswith("kafka."):
        hint = "service_url; kafka.* client settings have no meaning here"
    message = f"unknown option {name!r} for the magnetar {side}"
    return message + (f"; did you mean {hint}?" if hint else " (the options are listed in docs/spark.md)")


def check_known(options: Mapping[str, str], known: Iterable[str], side: str) -> None:
    """Refuse every option of ``options`` whose lower-cased name is not in ``known``."""
    known = tuple(known)
    names = {k.lower() for k in known}
    unknown = sorted(name for name in options if name.lower() not in names)
    if unknown:
        raise InvalidOptionError("; ".join(unknown_option_message(name, known, side) for name in unknown))
