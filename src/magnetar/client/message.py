"""What the application holds: message ids and received messages.

``MessageId`` follows the official client: ``ledger_id()``, ``entry_id()``, ``partition()``,
``batch_index()``, ``serialize()`` / ``MessageId.deserialize()``, ``MessageId.earliest`` and
``MessageId.latest``; ids order by (ledger, entry, batch index) like Pulsar's. A chunked
message's id is a ``ChunkMessageId``: its own position is the last chunk's, it remembers
the first chunk's (serialized as ``first_chunk_message_id``) and, while it lives in this
process, every chunk's, so that acknowledging it acknowledges each chunk.
"""

from __future__ import annotations

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.message_id import INT64_MAX, parse_message_id, to_signed, to_u64


class MessageId:
    """Position of a message in a topic: (ledger, entry[, batch index]) and its partition."""

    __slots__ = ("_batch_index", "_batch_size", "_entry_id", "_ledger_id", "_partition", "_topic")

    earliest: MessageId
    latest: MessageId

    def __init__(
        self,
        partition: int = -1,
        ledger_id: int = -1,
        entry_id: int = -1,
        batch_index: int = -1,
        batch_size: int = 0,
        topic: str | None = None,
    ) -> None:
        self._partition = partition
        self._ledger_id = ledger_id
        self._entry_id = entry_id
        self._batch_index = batch_index
        self._batch_size = batch_size
        self._topic = topic

    # --- accessors, named like the official client's -------------------------------------------------
    def ledger_id(self) -> int:
        return self._ledger_id

    def entry_id(self) -> int:
        return self._entry_id

    def partition(self) -> int:
        return self._partition

    def batch_index(self) -> int:
        return self._batch_index

    def batch_size(self) -> int:
        return self._batch_size

    def topic_name(self) -> str | None:
        return self._topic

    @property
    def is_batch(self) -> bool:
        return self._batch_index >= 0

    def entry_position(self) -> MessageId:
        """The whole entry's id (batch index dropped), for acknowledging a batch at once."""
        if self._batch_index < 0:
            return self
        return MessageId(self._partition, self._ledger_id, self._entry_id, topic=self._topic)

    def chunk_message_ids(self) -> list[MessageId]:
        """Every entry making up this message: one for an ordinary message."""
        return [self]

    # --- wire form ------------------------------------------------------------------------------
    def to_proto(self, *, with_batch: bool = True) -> wire.MessageIdData:
        data = wire.MessageIdData(ledger_id=to_u64(self._ledger_id), entry_id=to_u64(self._entry_id))
        if self._partition != -1:
            data.partition = self._partition
        if with_batch and self._batch_index != -1:
            data.batch_index = self._batch_index
        if with_batch and self._batch_size:
            data.batch_size = self._batch_size
        return data

    @classmethod
    def from_proto(cls, data: wire.MessageIdData, topic: str | None = None) -> MessageId:
        msg_id = cls(
            data.partition,
            to_signed(data.ledger_id),
            to_signed(data.entry_id),
            data.batch_index,
            data.batch_size,
            topic,
        )
        if data.HasField("first_chunk_message_id"):
            first = MessageId.from_proto(data.first_chunk_message_id, topic)
            return ChunkMessageId([first, msg_id])
        return msg_id

    def serialize(self) -> bytes:
        return self.to_proto().SerializeToString()

    @staticmethod
    def deserialize(data: bytes) -> MessageId:
        try:
            return MessageId.from_proto(parse_message_id(data))
        except ProtocolError as exc:
            raise ValueError(f"not a serialized message id: {exc}") from None

    # --- ordering, as Pulsar's: partition is part of equality, not of order -----------------------
    def _key(self) -> tuple[int, int, int]:
        return (self._ledger_id, self._entry_id, self._batch_index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() == other._key() and self._partition == other._partition

    def __hash__(self) -> int:
        return hash((self._ledger_id, self._entry_id, self._batch_index, self._partition))

    def __lt__(self, other: MessageId) -> bool:
        return self._key() < other._key()

    def __le__(self, other: MessageId) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: MessageId) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: MessageId) -> bool:
        return self._key() >= other._key()

    def __str__(self) -> str:
        return f"({self._ledger_id},{self._entry_id},{self._partition},{self._batch_index})"

    def __repr__(self) -> str:
        return f"MessageId{self}"


class ChunkMessageId(MessageId):
    """Id of a message sent in chunks: positioned at its last chunk, knowing its first (and all)."""

    __slots__ = ("_chunks",)

    def __init__(self, chunks: list[MessageId]) -> None:
        if not chunks:
            raise ValueError("a chunked message id needs at least one chunk")
        last = chunks[-1]
        super().__init__(last._partition, last._ledger_id, last._entry_id, -1, 0, last._topic)
        self._chunks = list(chunks)

    def first_chunk_message_id(self) -> MessageId:
        return self._chunks[0]

    def last_chunk_message_id(self) -> MessageId:
        return self._chunks[-1]

    def chunk_message_ids(self) -> list[MessageId]:
        return list(self._chunks)

    def to_proto(self, *, with_batch: bool = True) -> wire.MessageIdData:
        data = super().to_proto(with_batch=with_batch)
        data.first_chunk_message_id.CopyFrom(self._chunks[0].to_proto(with_batch=False))
        return data

    def __str__(self) -> str:
        return f"{self._chunks[0]};{super().__str__()}"


MessageId.earliest = MessageId(-1, -1, -1)
MessageId.latest = MessageId(-1, INT64_MAX, INT64_MAX)


class Message:
    """A received message, with the official client's accessors."""

    __slots__ = (
        "_broker_publish_time",
        "_data",
        "_event_time",
        "_index",
        "_message_id",
        "_ordering_key",
        "_partition_key",
        "_producer_name",
        "_properties",
        "_publish_time",
        "_redelivery_count",
        "_replicated_from",
        "_schema_version",
        "_topic",
        "cnx_generation",
    )

    def __init__(
        self,
        data: bytes,
        message_id: MessageId,
        *,
        topic: str,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        ordering_key: bytes | None = None,
        publish_time: int = 0,
        event_time: int = 0,
        producer_name: str = "",
        redelivery_count: int = 0,
        schema_version: bytes | None = None,
        index: int | None = None,
        broker_publish_time: int | None = None,
        cnx_generation: int = 0,
        replicated_from: str | None = None,
    ) -> None:
        self._data = data
        self._message_id = message_id
        self._topic = topic
        self._properties = properties or {}
        self._partition_key = partition_key
        self._ordering_key = ordering_key
        self._publish_time = publish_time
        self._event_time = event_time
        self._producer_name = producer_name
        self._redelivery_count = redelivery_count
        self._schema_version = schema_version
        self._index = index
        self._broker_publish_time = broker_publish_time
        self._replicated_from = replicated_from
        #: Which connection delivered it: a flow permit goes back only to the same one.
        self.cnx_generation = cnx_generation

    def data(self) -> bytes:
        return self._data

    def value(self) -> bytes:
        return self._data

    def properties(self) -> dict[str, str]:
        return self._properties

    def partition_key(self) -> str | None:
        return self._partition_key

    key = partition_key

    def ordering_key(self) -> bytes | None:
        return self._ordering_key

    def publish_timestamp(self) -> int:
        """Milliseconds since the epoch when the producer published it."""
        return self._publish_time

    def event_timestamp(self) -> int:
        """The application's event time in milliseconds, 0 when not set."""
        return self._event_time

    def message_id(self) -> MessageId:
        return self._message_id

    def topic_name(self) -> str:
        return self._topic

    def redelivery_count(self) -> int:
        return self._redelivery_count

    def producer_name(self) -> str:
        return self._producer_name

    def schema_version(self) -> bytes | None:
        return self._schema_version

    def index(self) -> int | None:
        """Broker-assigned continuous index (PIP 70), or None when the broker sends none."""
        return self._index

    def broker_publish_time(self) -> int | None:
        """When the broker stored it (PIP 70), or None when the broker sends none."""
        return self._broker_publish_time

    def replicated_from(self) -> str | None:
        """The cluster a geo-replicator copied it from, None when it was produced here (the
        Java client's ``getReplicatedFrom``)."""
        return self._replicated_from

    def is_replicated(self) -> bool:
        return self._replicated_from is not None

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Message(id={self._message_id}, topic={self._topic!r}, {len(self._data)} bytes)"
