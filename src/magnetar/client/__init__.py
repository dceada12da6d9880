"""Magnetar's native Pulsar client.

``magnetar.client.Client`` is the blocking client (an event loop on a background thread);
``magnetar.client.aio.Client`` is the asyncio one. Names and options follow the official
``pulsar-client`` package: ``create_producer``, ``subscribe``, ``create_reader``, ``send``,
``receive``, ``acknowledge`` and so on. See docs/client.md.
"""

from magnetar.client.authentication import Authentication, AuthenticationToken
from magnetar.client.columns import MessageColumns
from magnetar.client.compression import CompressionType
from magnetar.client.consumer import ConsumerType, InitialPosition
from magnetar.client.errors import (
    AlreadyClosed,
    ClientError,
    ConnectError,
    HttpPortError,
    InvalidConfiguration,
    MessageTooBig,
    ProducerQueueIsFull,
    ServerError,
    Timeout,
    UnsupportedOption,
)
from magnetar.client.message import ChunkMessageId, Message, MessageId
from magnetar.client.sync import Client, ColumnReader, Consumer, Producer, Reader, Result
from magnetar.client.tls import AuthenticationTLS, TlsError

__all__ = [
    "AlreadyClosed",
    "Authentication",
    "AuthenticationTLS",
    "AuthenticationToken",
    "ChunkMessageId",
    "Client",
    "ClientError",
    "ColumnReader",
    "CompressionType",
    "ConnectError",
    "Consumer",
    "ConsumerType",
    "HttpPortError",
    "InitialPosition",
    "InvalidConfiguration",
    "Message",
    "MessageColumns",
    "MessageId",
    "MessageTooBig",
    "Producer",
    "ProducerQueueIsFull",
    "Reader",
    "Result",
    "ServerError",
    "Timeout",
    "TlsError",
    "UnsupportedOption",
]
