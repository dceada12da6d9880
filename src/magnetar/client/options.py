"""The options each client entry point takes, defined once for the asyncio client and the sync facade.

Every name of the official Python client's ``Client``, ``create_producer``, ``subscribe``,
``create_reader`` and ``create_table_view`` is in these tables, so code moved from it never runs
differently unnoticed: an option is either supported, accepted because it changes nothing here (a
tuning knob of the C++ client's threads, say), or refused by name with ``UnsupportedOption``. A
refused option is still accepted when its value asks for what Magnetar does anyway (``None``, the
official client's "not set", or e.g. ``schema=BytesSchema()``). A name in no table is a
``TypeError`` naming the nearest known one, as Python does for a misspelt keyword argument.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.client.errors import UnsupportedOption

#: The statuses, as docs/client.md's tables say them.
SUPPORTED = "supported"
IGNORED = "accepted, no effect"
REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Option:
    """How an entry point treats one option name; ``why`` is said in errors and docs."""

    status: str
    why: str = ""
    #: For a refused option: the values that ask for what Magnetar does anyway (besides None).
    accepts: Callable[[Any], bool] | None = None
    #: Whether the official Python client has this option (ours only when False).
    official: bool = True

    def refuses(self, value: Any) -> bool:
        if self.status != REFUSED or value is None:
            return False
        return self.accepts is None or not self.accepts(value)


def _int_is(*allowed: int) -> Callable[[Any], bool]:
    """Accepts an official enum member (or int) whose value is one of ``allowed``."""

    def check(value: Any) -> bool:
        try:
            return int(value) in allowed
        except (TypeError, ValueError):
            return False

    return check


def _is_bytes_schema(value: Any) -> bool:
    """The official client's default schema: payloads as bytes, which is all our client sends."""
    return type(value).__name__ == "BytesSchema"


def _supported(why: str = "", official: bool = True) -> Option:
    return Option(SUPPORTED, why, official=official)


def _ours(why: str) -> Option:
    return Option(SUPPORTED, why, official=False)


_SCHEMA = Option(
    REFUSED,
    "schemas are not implemented by Magnetar's client: payloads are bytes (BytesSchema is accepted)",
    _is_bytes_schema,
)
_CRYPTO = Option(REFUSED, "end-to-end encryption is not implemented by Magnetar's client")
_CRYPTO_FAILURE = Option(
    REFUSED,
    "end-to-end encryption is not implemented; FAIL (the default) is accepted",
    _int_is(0),
)

CLIENT_OPTIONS: dict[str, Option] = {
    "authentication": _supported("token and TLS authentication"),
    "operation_timeout_seconds": _supported(),
    "io_threads": Option(IGNORED, "one asyncio event loop does all the I/O"),
    "message_listener_threads": Option(
        REFUSED,
        "listeners run on one thread, in order; only 1 (the default) is accepted",
        _int_is(1),
    ),
    "concurrent_lookup_requests": Option(IGNORED, "lookups are not limited in number"),
    "log_conf_file_path": Option(
        REFUSED, "a C++ log4cxx file; Magnetar's client logs with Python logging ('magnetar.client')"
    ),
    "stats_interval_in_seconds": Option(IGNORED, "the C++ client's periodic stats log line; none here"),
    "use_tls": _supported(),
    "tls_trust_certs_file_path": _supported(),
    "tls_allow_insecure_connection": _supported(),
    "tls_validate_hostname": _supported(),
    "logger": Option(
        IGNORED, "the client's logs go to Python logging's 'magnetar.client' logger: configure that one"
    ),
    "connection_timeout_ms": _supported(),
    "listener_name": _supported(),
    "tls_private_key_file_path": _supported(),
    "tls_certificate_file_path": _supported(),
    "keepalive_interval_seconds": _ours("seconds between PINGs on an idle connection"),
    "initial_backoff_seconds": _ours("first reconnection delay"),
    "max_backoff_seconds": _ours("longest reconnection delay"),
    "max_lookup_redirects": _ours("lookup redirects followed before giving up"),
    "partitions_update_interval_seconds": _ours(
        "how often a table view looks for partitions added to its topic, 60 s as the C++ client"
    ),
}

PRODUCER_OPTIONS: dict[str, Option] = {
    "producer_name": _supported(),
    "schema": _SCHEMA,
    "initial_sequence_id": _supported(),
    "send_timeout_millis": _supported(),
    "compression_type": _supported("NONE, LZ4, ZLib, ZSTD, SNAPPY"),
    "max_pending_messages": _supported(),
    "max_pending_messages_across_partitions": Option(
        REFUSED, "each partition's producer has its own max_pending_messages; no limit across them"
    ),
    "block_if_queue_full": _supported(),
    "batching_enabled": _supported(),
    "batching_max_messages": _supported(),
    "batching_max_allowed_size_in_bytes": _supported(),
    "batching_max_publish_delay_ms": _supported(),
    "chunking_enabled": _supported(),
    "message_routing_mode": Option(
        REFUSED,
        "keyless messages go round robin (RoundRobinDistribution), or to message_router "
        "(CustomPartition); UseSinglePartition is not implemented",
        _int_is(1, 2),
    ),
    "lazy_start_partitioned_producers": Option(
        REFUSED, "every partition's producer starts at once; only False is accepted", _int_is(0)
    ),
    "properties": _supported(),
    "batching_type": Option(
        REFUSED, "batches are formed in send order (Default); KeyBased is not implemented", _int_is(0)
    ),
    "encryption_key": _CRYPTO,
    "crypto_key_reader": _CRYPTO,
    "access_mode": _supported("Shared, Exclusive, WaitForExclusive, ExclusiveWithFencing"),
    "message_router": _supported("a callable(message, partitions) -> partition"),
    "hashing_scheme": _ours(
        "how a key picks its partition: BoostHash (the official Python client's, its only one), "
        "JavaStringHash, Murmur3_32Hash"
    ),
    "fail_refused_sends": _ours(
        "a send the broker refuses fails that message's future (the later ones go on) instead of "
        "being sent again after a reconnect; for a sender that must know, as a geo-replicator"
    ),
}

CONSUMER_OPTIONS: dict[str, Option] = {
    "consumer_type": _supported("Exclusive, Shared, Failover, KeyShared (and our Broadcast)"),
    "schema": _SCHEMA,
    "message_listener": _supported("called with (consumer, message)"),
    "receiver_queue_size": _supported(),
    "max_total_receiver_queue_size_across_partitions": Option(
        REFUSED, "each partition's consumer has its own receiver_queue_size; no limit across them"
    ),
    "consumer_name": _supported(),
    "unacked_messages_timeout_ms": _supported(),
    "broker_consumer_stats_cache_time_ms": Option(
        IGNORED, "caches the broker's consumer stats, which this client does not ask for"
    ),
    "negative_ack_redelivery_delay_ms": _supported(),
    "is_read_compacted": _supported(),
    "properties": _supported(),
    "pattern_auto_discovery_period": _supported("seconds between looks for new matching topics"),
    "initial_position": _supported(),
    "crypto_key_reader": _CRYPTO,
    "replicate_subscription_state_enabled": _supported(),
    "max_pending_chunked_message": _supported(),
    "auto_ack_oldest_chunked_message_on_queue_full": _supported(),
    "start_message_id_inclusive": _supported(),
    "batch_receive_policy": Option(REFUSED, "batch_receive() is not implemented by Magnetar's client"),
    "key_shared_policy": Option(
        REFUSED, "Key_Shared consumers use AUTO_SPLIT hash ranges (the default); no sticky ranges"
    ),
    "batch_index_ack_enabled": _supported(),
    "regex_subscription_mode": Option(
        REFUSED,
        "a pattern's topic domain (persistent:// or non-persistent://) says which topics it "
        "matches; only PersistentOnly (the default) is accepted",
        _int_is(0),
    ),
    "dead_letter_policy": Option(
        REFUSED, "dead-letter topics are not implemented by Magnetar's client (messages are redelivered)"
    ),
    "crypto_failure_action": _CRYPTO_FAILURE,
    "expire_time_of_incomplete_chunked_message_ms": _ours(
        "how long a chunked message's first chunks wait for the rest"
    ),
    "subscription_properties": _ours("properties of the subscription itself"),
    "priority_level": _ours("the consumer's priority for Shared dispatch"),
    "ack_group_time_ms": _ours("how long acknowledgements are grouped before they are sent"),
}

READER_OPTIONS: dict[str, Option] = {
    "schema": _SCHEMA,
    "reader_listener": _supported("called with (reader, message)"),
    "receiver_queue_size": _supported(),
    "reader_name": _supported(),
    "subscription_role_prefix": _supported(),
    "is_read_compacted": _supported(),
    "crypto_key_reader": _CRYPTO,
    "start_message_id_inclusive": _supported(),
    "crypto_failure_action": _CRYPTO_FAILURE,
}

TABLE_VIEW_OPTIONS: dict[str, Option] = {
    "schema": _SCHEMA,
}

#: Entry point name (as in errors) -> its table.
ENTRY_POINTS: dict[str, dict[str, Option]] = {
    "Client": CLIENT_OPTIONS,
    "create_producer": PRODUCER_OPTIONS,
    "subscribe": CONSUMER_OPTIONS,
    "create_reader": READER_OPTIONS,
    "create_table_view": TABLE_VIEW_OPTIONS,
}


def unexpected_option_message(entry: str, name: str, known: Mapping[str, Any]) -> str:
    """Python's wording for a bad keyword, with the nearest known name when one is close."""
    message = f"{entry}() got an unexpected option {name!r}"
    nearest = difflib.get_close_matches(name, list(known), n=1)
    if nearest:
        message += f" (did you mean {nearest[0]!r}?)"
    return message


def check_options(entry: str, options: Mapping[str, Any]) -> None:
    """Refuse what ``entry`` does not know (``TypeError``) or does not implement (``UnsupportedOption``)."""
    table = ENTRY_POINTS[entry]
    for name, value in options.items():
        option = table.get(name)
        if option is None:
            raise TypeError(unexpected_option_message(entry, name, table))
        if option.refuses(value):
            raise UnsupportedOption(
                f"{entry}(): option {name}={value!r} is not supported by Magnetar's client: {option.why}"
            )
