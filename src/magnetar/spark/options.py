"""Reading and checking the data source's options (Spark hands them over as strings).

Names follow Spark's Kafka source and Pulsar's Spark connector; Spark passes option keys
case-insensitively (lower-cased), so every lookup here is by the lower-cased name.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import overload

from magnetar.client.admin import indexed_topic
from magnetar.protocol.topic_name import split_topic_pattern
from magnetar.spark.errors import InvalidOptionError
from magnetar.spark.known_options import READ_COMPACTED, SINK_OPTIONS, SOURCE_OPTIONS, check_known
from magnetar.spark.offsets import EARLIEST, LATEST
from magnetar.spark.retry import DEFAULT_RETRY_TIMEOUT_MS, RetryPolicy
from magnetar.spark.schema import DEFAULT_BYTES_PER_BATCH
from magnetar.spark.security import ConnectionSecurity, option_flag, parse_security
from magnetar.spark.trigger import DEFAULT_MAX_TRIGGER_DELAY_MS, parse_duration_ms

DEFAULT_SERVICE_URL = "pulsar://localhost:6650"
DEFAULT_ADMIN_PORT = 8080
DEFAULT_ADMIN_PORT_TLS = 8443  # Pulsar's webServicePortTls


@lru_cache(maxsize=1024)
def full_name(topic: str) -> str:
    """``my-topic`` -> ``persistent://public/default/my-topic``; refuses non-persistent topics
    (only they have the message index the connector reads by); a ValueError names the fault."""
    return str(indexed_topic(topic.strip()))


def _lower(options: Mapping[str, object]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


@overload
def _int(options: dict[str, str], name: str, default: int, minimum: int = 0) -> int: ...
@overload
def _int(options: dict[str, str], name: str, default: None = None, minimum: int = 0) -> int | None: ...
def _int(options: dict[str, str], name: str, default: int | None = None, minimum: int = 0) -> int | None:
    raw = options.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidOptionError(f"option {name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise InvalidOptionError(f"option {name} must be at least {minimum}, not {value}")
    return value


def _retry_timeout_ms(options: dict[str, str]) -> int:
    """How long broker calls are retried across a broker restart; 0: tried once."""
    return _int(options, "retryTimeoutMs", DEFAULT_RETRY_TIMEOUT_MS, minimum=0)


def _duration_ms(options: dict[str, str], name: str, default: int) -> int:
    raw = options.get(name.lower())
    return default if raw is None or raw.strip() == "" else parse_duration_ms(raw, name)


def _urls(options: dict[str, str]) -> tuple[str, str]:
    service_url = options.get("service_url") or options.get("serviceurl") or DEFAULT_SERVICE_URL
    admin_url = options.get("admin_url") or options.get("adminurl") or options.get("admin.url")
    if not admin_url:
        parts = urllib.parse.urlsplit(service_url)
        host = parts.hostname or "localhost"
        if parts.scheme == "pulsar+ssl":  # a TLS broker's admin API is HTTPS too
            admin_url = f"https://{host}:{DEFAULT_ADMIN_PORT_TLS}"
        else:
            admin_url = f"http://{host}:{DEFAULT_ADMIN_PORT}"
    return service_url, admin_url.rstrip("/")


def parse_offsets_spec(raw: str | None, name: str, default: str) -> str | dict[str, int]:
    """``earliest`` / ``latest`` / a JSON object ``{"<topic partition>": index}`` (-2 earliest, -1 latest)."""
    value = (raw or default).strip()
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    try:
        parsed = json.loads(value)
    except ValueError:
        raise InvalidOptionError(
            f'option {name} must be "earliest", "latest" or a JSON object of topic partition to index, '
            f"not {value!r}"
        ) from None
    if not isinstance(parsed, dict):
        raise InvalidOptionError(f"option {name}: the JSON must be an object, not {value!r}")
    offsets: dict[str, int] = {}
    for key, index in parsed.items():
        valid = isinstance(index, int) and not isinstance(index, bool)
        if not valid or (index < 0 and index not in (EARLIEST, LATEST)):
            raise InvalidOptionError(
                f"option {name}: {key!r} must map to an index >= 0, -2 (earliest) or -1 (latest), "
                f"not {index!r}"
            )
        try:
            offsets[full_name(key)] = index if index >= 0 else (EARLIEST if index == -2 else LATEST)
        except ValueError as exc:
            raise InvalidOptionError(f"option {name}: {exc}") from None
    return offsets


def parse_timestamps_spec(raw: str | None, name: str) -> dict[str, int] | None:
    """JSON ``{"<topic partition>": ms since the epoch}`` (Kafka's ``...ByTimestamp`` options,
    keyed by partition name as ``startingOffsets`` is); None when not given."""
    if raw is None or raw.strip() == "":
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidOptionError(
            f"option {name} must be a JSON object of topic partition to timestamp (ms), such as "
            f'{{"persistent://public/default/t-partition-0": 1700000000000}}, not {raw!r}'
        )
    stamps: dict[str, int] = {}
    for key, ts in parsed.items():
        if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
            raise InvalidOptionError(f"option {name}: {key!r} must map to a timestamp (ms) >= 0, not {ts!r}")
        try:
            stamps[full_name(key)] = ts
        except ValueError as exc:
            raise InvalidOptionError(f"option {name}: {exc}") from None
    return stamps


@dataclass(frozen=True)
class TopicSelection:
    """What to read: fixed topics, or every topic of a namespace matching a pattern."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    def _pattern_parts(self) -> tuple[str, str]:
        """(``tenant/namespace``, the pattern over full topic names); ValueError unless the pattern
        is ``[persistent://][tenant/namespace/]regex``."""
        assert self.pattern is not None
        domain, namespace, full = split_topic_pattern(self.pattern)
        if domain != "persistent":
            raise ValueError(f"only persistent topics have a message index, not {self.pattern!r}")
        return namespace, full

    @property
    def pattern_namespace(self) -> str:
        return self._pattern_parts()[0]

    @property
    def compiled_pattern(self) -> re.Pattern[str]:
        return re.compile(self._pattern_parts()[1])


def _selection(options: dict[str, str]) -> TopicSelection:
    given = [k for k in ("topic", "topics", "topicspattern") if options.get(k)]
    if len(given) != 1:
        raise InvalidOptionError(
            "give exactly one of the options topic, topics (comma separated) or topicsPattern (a regex), "
            f"not {given or 'none'}"
        )
    key = given[0]
    if key == "topicspattern":
        pattern = options[key]
        try:
            selection = TopicSelection(pattern=pattern)
            selection.compiled_pattern  # noqa: B018 - validate now
        except re.error as exc:
            raise InvalidOptionError(f"option topicsPattern is not a valid regex: {exc}") from None
        except ValueError as exc:
            raise InvalidOptionError(f"option topicsPattern: {exc}") from None
        return selection
    names = [t.strip() for t in options[key].split(",") if t.strip()]
    try:
        topics = tuple(dict.fromkeys(full_name(t) for t in names))
    except ValueError as exc:
        raise InvalidOptionError(f"option {key}: {exc}") from None
    if not topics:
        raise InvalidOptionError(f"option {key} names no topic")
    return TopicSelection(topics=topics)


@dataclass(frozen=True)
class ReadOptions:
    service_url: str
    admin_url: str
    selection: TopicSelection
    starting: str | dict[str, int]
    ending: str | dict[str, int]
    starting_timestamp: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    subscription_name: str | None
    max_records_per_partition: int
    min_partitions: int | None
    read_timeout_ms: int
    records_per_batch: int
    retry_timeout_ms: int = DEFAULT_RETRY_TIMEOUT_MS
    bytes_per_batch: int = DEFAULT_BYTES_PER_BATCH
    security: ConnectionSecurity = field(default_factory=ConnectionSecurity)
    ending_timestamp: int | None = None
    starting_by_timestamp: dict[str, int] | None = None
    ending_by_timestamp: dict[str, int] | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    #: ``pulsar.reader.readCompacted``: read each partition's compacted view (compaction.md).
    read_compacted: bool = False

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy.of_ms(self.retry_timeout_ms)

    @classmethod
    def parse(cls, raw: Mapping[str, str], streaming: bool | None) -> ReadOptions:
        """Checked options; ``streaming=None`` (``DataSource.schema()``, which Spark calls before it
        knows whether the read is a stream) checks all but what depends on the kind of read."""
        check_known(raw, SOURCE_OPTIONS, "source")
        options = _lower(raw)
        service_url, admin_url = _urls(options)
        starting = parse_offsets_spec(
            options.get("startingoffsets"), "startingOffsets", "latest" if streaming else "earliest"
        )
        ending = parse_offsets_spec(options.get("endingoffsets"), "endingOffsets", "latest")
        if streaming is False and starting == "latest":
            raise InvalidOptionError('startingOffsets "latest" reads nothing in a batch query')
        if ending == "earliest" or (isinstance(ending, dict) and EARLIEST in ending.values()):
            raise InvalidOptionError("endingOffsets cannot be earliest")
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if streaming and name.lower() in options:
                raise InvalidOptionError(f"{name} is for batch queries; a stream has no end")
        starting_timestamp = _int(options, "startingTimestamp")
        ending_timestamp = _int(options, "endingTimestamp")
        if (
            starting_timestamp is not None
            and ending_timestamp is not None
            and ending_timestamp < starting_timestamp
        ):
            raise InvalidOptionError(
                f"endingTimestamp {ending_timestamp} is before startingTimestamp {starting_timestamp}"
            )
        return cls(
            service_url=service_url,
            admin_url=admin_url,
            selection=_selection(options),
            starting=starting,
            ending=ending,
            starting_timestamp=starting_timestamp,
            ending_timestamp=ending_timestamp,
            starting_by_timestamp=parse_timestamps_spec(
                options.get("startingoffsetsbytimestamp"), "startingOffsetsByTimestamp"
            ),
            ending_by_timestamp=parse_timestamps_spec(
                options.get("endingoffsetsbytimestamp"), "endingOffsetsByTimestamp"
            ),
            max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", minimum=1),
            min_offsets_per_trigger=_int(options, "minOffsetsPerTrigger", minimum=1),
            max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
            fail_on_data_loss=option_flag(options, "failOnDataLoss", True),
            subscription_name=options.get("subscriptionname") or None,
            max_records_per_partition=_int(options, "maxRecordsPerPartition", 100_000, minimum=1),
            min_partitions=_int(options, "minPartitions", minimum=1),
            read_timeout_ms=_int(options, "readTimeoutMs", 30_000, minimum=1),
            records_per_batch=_int(options, "recordsPerBatch", 10_000, minimum=1),
            retry_timeout_ms=_retry_timeout_ms(options),
            bytes_per_batch=_int(options, "bytesPerBatch", DEFAULT_BYTES_PER_BATCH, minimum=1),
            security=parse_security(options),
            read_compacted=option_flag(options, READ_COMPACTED, False),
        )


@dataclass(frozen=True)
class WriteOptions:
    service_url: str
    admin_url: str
    topic: str | None
    producer_name_prefix: str | None
    enable_deduplication: bool
    sort_before_write: bool
    chunking_enabled: bool
    send_timeout_ms: int
    retry_timeout_ms: int = DEFAULT_RETRY_TIMEOUT_MS
    security: ConnectionSecurity = field(default_factory=ConnectionSecurity)

    @property
    def retry(self) -> RetryPolicy:
        return RetryPolicy.of_ms(self.retry_timeout_ms)

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> WriteOptions:
        check_known(raw, SINK_OPTIONS, "sink")
        options = _lower(raw)
        service_url, admin_url = _urls(options)
        topic = options.get("topic")
        try:
            topic = full_name(topic) if topic else None
        except ValueError as exc:
            raise InvalidOptionError(f"option topic: {exc}") from None
        return cls(
            service_url=service_url,
            admin_url=admin_url,
            topic=topic,
            producer_name_prefix=options.get("producernameprefix") or None,
            enable_deduplication=option_flag(options, "enableDeduplication", False),
            sort_before_write=option_flag(options, "sortBeforeWrite", False),
            chunking_enabled=option_flag(options, "chunkingEnabled", False),
            send_timeout_ms=_int(options, "sendTimeoutMs", 30_000, minimum=1),
            retry_timeout_ms=_retry_timeout_ms(options),
            security=parse_security(options),
        )
