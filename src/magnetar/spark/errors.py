"""The connector's errors: each names what is wrong and what to do about it."""

from __future__ import annotations


class MagnetarSparkError(Exception):
    """Base of every error the connector raises on purpose."""


class InvalidOptionError(MagnetarSparkError, ValueError):
    """An option is missing, unknown in combination, or not parseable."""


class UnknownTopicError(MagnetarSparkError):
    """A topic named by ``topic`` / ``topics`` does not exist (the source never creates one)."""


class IndexNotEnabledError(MagnetarSparkError):
    """The broker stores no message index: offsets cannot be mapped to messages."""

    def __init__(self, topic: str, detail: str = "") -> None:
        super().__init__(
            f"the broker keeps no message index for {topic}: the Spark connector uses the broker "
            'entry index as offsets; add "index" to broker_entry_metadata_interceptors in the broker '
            "configuration (it is on by default)" + (f" ({detail})" if detail else "")
        )
        self.topic = topic


class OffsetOutOfRangeError(MagnetarSparkError):
    """Offsets to read are no longer retained (or not written yet) and failOnDataLoss is true."""


class DeduplicationDisabledError(MagnetarSparkError):
    """The sink needs broker deduplication on the target namespace for exactly-once output."""


class ReadStalledError(MagnetarSparkError):
    """A bounded read got no message for readTimeoutMs before reaching the end of its range."""
