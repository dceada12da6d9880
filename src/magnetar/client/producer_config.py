"""A producer's settings, as the official client names them."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.client.compression import CompressionType
from magnetar.client.errors import InvalidConfiguration
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.key_hash import DEFAULT_HASHING_SCHEME, HashingScheme, hashing_scheme


@dataclass(slots=True)
class ProducerConfig:
    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_millis: int = 30_000
    compression_type: int = CompressionType.NONE
    max_pending_messages: int = 1000
    block_if_queue_full: bool = False
    batching_enabled: bool = False
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: int = 10
    chunking_enabled: bool = False
    properties: dict[str, str] | None = None
    access_mode: int = wire.Shared
    #: How a partition key picks a partition: a ``HashingScheme`` or its name ("BoostHash",
    #: "JavaStringHash", "Murmur3_32Hash"); the default is the official Python client's.
    hashing_scheme: HashingScheme | str = DEFAULT_HASHING_SCHEME
    #: A SEND the broker refuses (SendError) fails its message's future and the later sends go on,
    #: instead of the client reconnecting and sending it again (the official client's way, kept
    #: by default). A geo-replicator wants to know which message the remote refused.
    fail_refused_sends: bool = False

    def validate(self) -> None:
        if self.batching_enabled and self.chunking_enabled:
            raise InvalidConfiguration(
                "batching and chunking cannot be enabled together: create the producer with "
                "batching_enabled=False to send chunked messages"
            )
        self.compression_type = CompressionType(int(self.compression_type))
        self.access_mode = int(self.access_mode)
        try:
            self.hashing_scheme = hashing_scheme(self.hashing_scheme)
        except ValueError as exc:
            raise InvalidConfiguration(str(exc)) from None
