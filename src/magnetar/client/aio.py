"""The asyncio API: ``from magnetar.client.aio import Client``.

``async with Client("pulsar://127.0.0.1:6650") as client:`` then ``await client.create_producer(...)``,
``await client.subscribe(...)``, ``await consumer.receive()`` and so on, with the same names
and options as the blocking ``magnetar.client.Client``.
"""

from magnetar.client.client import Client
from magnetar.client.compression import CompressionType
from magnetar.client.consumer import Consumer, ConsumerType, InitialPosition
from magnetar.client.message import ChunkMessageId, Message, MessageId
from magnetar.client.multi_topics_consumer import MultiTopicsConsumer
from magnetar.client.partitioned_producer import PartitionedProducer
from magnetar.client.producer import Producer
from magnetar.client.reader import Reader
from magnetar.client.table_view import TableView
from magnetar.client.tls import AuthenticationTLS, TlsError

__all__ = [
    "AuthenticationTLS",
    "ChunkMessageId",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerType",
    "InitialPosition",
    "Message",
    "MessageId",
    "MultiTopicsConsumer",
    "PartitionedProducer",
    "Producer",
    "Reader",
    "TableView",
    "TlsError",
]
