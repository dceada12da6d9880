"""The PUBLISH packets of one connection's pass, stored together: one entry per topic.

MQTT has no batches: a device with 100 QoS 1 messages in flight sends 100 PUBLISH packets, and
one read of its socket often holds dozens of them. Stored one entry each, every message paid
for an append, an index slot, a deduplication check, a dispatch to each subscription and an
acknowledgement there. The messages of one pass to one topic are instead stored as one Pulsar
batch entry, as the official producer sends them with batching on: each keeps its own
properties and sequence id (``SingleMessageMetadata``), the entry carries the first and the
highest sequence id (deduplication), and every consumer, MQTT subscribers and Pulsar's clients
alike, takes the batch apart into its messages. They share one append and one group commit;
each message is still answered on its own (PUBACK, or its own refusal) once the entry is
durable, and the answers of one commit leave in one write (``MqttConnection.send``).

A message is stored alone (a plain entry, as a Pulsar producer without batching sends it) when
it is the only one of its topic in the pass, when it is large (over ``BATCH_MAX_PAYLOAD``; past
``max_message_size`` it is chunked, ``large_messages.py``), and at QoS 2, whose sequence id is
recorded before it is stored and may be one the topic saw before (a copy sent again after a
restart). The connection flushes what it gathered when its pass over the decoded packets ends or
stops to wait for something off the loop, so every topic gets its messages in the order they
came (4.6), under ascending sequence ids.
"""

from __future__ import annotations

import functools
import logging
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from magnetar.broker.errors import REQUEST_ERRORS
from magnetar.broker.mqtt import large_messages
from magnetar.broker.producer import Producer
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol import wire
from magnetar.protocol.headers import encode_headers_and_payload
from magnetar.storage.position import Position
from magnetar.varint import encode as varint

log = logging.getLogger(__name__)

Stored = Callable[[Position | None, Exception | None], None]
#: A message with a larger payload is stored alone.
BATCH_MAX_PAYLOAD = 64 * 1024
#: At most this many bytes of payload in one batch (the official producer's ``batchingMaxBytes``),
#: and never more than half of ``max_message_size``, whatever the properties add.
BATCH_MAX_BYTES = 128 * 1024
#: At most this many messages in one batch (the official producer's ``batchingMaxMessages``).
BATCH_MAX_MESSAGES = 1000


@dataclass(slots=True)
class Pending:
    """One message waiting for the end of the pass."""

    payload: bytes
    #: Its Pulsar properties (``messages.pulsar_properties``).
    properties: Sequence[tuple[str, str]]
    sequence_id: int
    #: When it came, in milliseconds since the epoch (the entry's publish time).
    publish_ms: int
    #: Told once it is durable, or why not.
    stored: Stored
    #: Stored as an entry of its own (QoS 2).
    alone: bool = False

    def size(self) -> int:
        """Its bytes in a batch, about: payload, properties and the fields around them."""
        return len(self.payload) + _properties_size(tuple(self.properties))


def _properties_size(properties: tuple[tuple[str, str], ...]) -> int:
    """Its properties' bytes and the fields around them; the few a PUBLISH without properties
    has, counted once (``_PLAIN_SIZES``)."""
    size = _PLAIN_SIZES.get(properties)
    if size is None:
        size = sum(len(key) + len(value) + 4 for key, value in properties) + 16
    return size


#: What ``_properties_size`` says of the properties of a PUBLISH without any (``MQTT_QOS``, and
#: ``MQTT_RETAIN``), counted once.
_PLAIN_SIZES: dict[tuple[tuple[str, str], ...], int] = {
    plain: sum(len(key) + len(value) + 4 for key, value in plain) + 16
    for plain in [
        (("MQTT_QOS", qos),) if not retain else (("MQTT_RETAIN", "true"), ("MQTT_QOS", qos))
        for qos in "012"
        for retain in (False, True)
    ]
}


class PublishBatches:
    """A connection's messages of this pass, by producer (one per topic), in the order they came."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: dict[int, tuple[PersistentTopic, Producer, list[Pending]]] = {}

    def __bool__(self) -> bool:
        return bool(self._pending)

    def add(self, topic: PersistentTopic, producer: Producer, message: Pending) -> None:
        held = self._pending.get(id(producer))
        if held is None:
            self._pending[id(producer)] = (topic, producer, [message])
        else:
            held[2].append(message)

    def flush(self, max_message_size: int) -> None:
        """Store what was gathered: each topic's messages in order, batched where they may be."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for topic, producer, messages in pending.values():
            store_all(topic, producer, messages, max_message_size)


def store_all(topic: PersistentTopic, producer: Producer, messages: list[Pending], max_size: int) -> None:
    """Store ``messages`` in order: runs of small ones as batches, the others alone."""
    limit = min(BATCH_MAX_BYTES, max_size // 2)
    run: list[Pending] = []
    size = 0
    for message in messages:
        if message.alone or len(message.payload) > min(BATCH_MAX_PAYLOAD, limit):
            _store_run(topic, producer, run, max_size)
            run, size = [], 0
            store_one(topic, producer, message, max_size)
            continue
        one = len(message.payload) + _properties_size(tuple(message.properties))  # ``size``, inline
        if run and (size + one > limit or len(run) >= BATCH_MAX_MESSAGES):
            _store_run(topic, producer, run, max_size)
            run, size = [], 0
        run.append(message)
        size += one
    _store_run(topic, producer, run, max_size)


def _store_run(topic: PersistentTopic, producer: Producer, run: list[Pending], max_size: int) -> None:
    if len(run) == 1:
        store_one(topic, producer, run[0], max_size)
    elif run:
        _store_batch(topic, producer, run)


def store_one(topic: PersistentTopic, producer: Producer, message: Pending, max_size: int) -> None:
    """A plain entry of one message (chunks when it is over ``max_size``)."""
    metadata = wire.MessageMetadata(
        producer_name=producer.name, sequence_id=message.sequence_id, publish_time=message.publish_ms
    )
    for key, value in message.properties:
        metadata.properties.add(key=key, value=value)
    try:
        if metadata.ByteSize() + len(message.payload) > max_size:
            large_messages.store_chunked(topic, producer, metadata, message.payload, max_size, message.stored)
            return
        data = encode_headers_and_payload(metadata, message.payload)
        sequence = message.sequence_id
        send = wire.CommandSend(producer_id=producer.producer_id, sequence_id=sequence, num_messages=1)
        topic.publish(producer, send, memoryview(data), message.stored, metadata)
    except Exception as exc:
        if not isinstance(exc, REQUEST_ERRORS):
            log.exception("%s: storing a message failed", topic.name)
        message.stored(None, exc)


def single_metadata(properties: Sequence[tuple[str, str]], payload_size: int, sequence_id: int) -> bytes:
    """A batched message's ``SingleMessageMetadata``, serialized: its properties (serialized once
    for every message that has the same), then ``payload_size`` (field 3) and ``sequence_id``
    (field 8) as protobuf writes them, in field order. A message's properties are mostly the
    same as the one before (``MQTT_QOS`` alone): building a protobuf object for each was most of
    a batch's cost per message."""
    return b"".join(
        (_properties_bytes(tuple(properties)), b"\x18", varint(payload_size), b"\x40", varint(sequence_id))
    )


@functools.lru_cache(maxsize=1024)
def _properties_bytes(properties: tuple[tuple[str, str], ...]) -> bytes:
    single = wire.SingleMessageMetadata()
    for key, value in properties:
        single.properties.add(key=key, value=value)
    return single.SerializePartialToString()  # payload_size (required) follows


_U32 = struct.Struct(">I")


def _store_batch(topic: PersistentTopic, producer: Producer, run: list[Pending]) -> None:
    parts: list[bytes] = []
    pack = _U32.pack
    for message in run:
        payload = message.payload
        properties = _properties_bytes(tuple(message.properties))
        size, sequence = varint(len(payload)), varint(message.sequence_id)
        # [size u32][SingleMessageMetadata: properties, payload_size, sequence_id][payload]
        length = pack(len(properties) + len(size) + len(sequence) + 2)
        parts += (b"".join((length, properties, b"\x18", size, b"\x40", sequence)), payload)
    first, highest = run[0].sequence_id, run[-1].sequence_id
    metadata = wire.MessageMetadata(
        producer_name=producer.name,
        sequence_id=first,
        highest_sequence_id=highest,
        publish_time=run[0].publish_ms,
        num_messages_in_batch=len(run),
    )
    callbacks = [message.stored for message in run]

    def stored(position: Position | None, exc: Exception | None) -> None:
        for callback in callbacks:
            try:
                callback(position, exc)
            except Exception:
                log.exception("%s: answering a stored message failed", topic.name)

    try:
        data = encode_headers_and_payload(metadata, b"".join(parts))
        send = wire.CommandSend(
            producer_id=producer.producer_id,
            sequence_id=first,
            highest_sequence_id=highest,
            num_messages=len(run),
        )
        topic.publish(producer, send, memoryview(data), stored, metadata)
    except Exception as exc:
        if not isinstance(exc, REQUEST_ERRORS):
            log.exception("%s: storing a batch of messages failed", topic.name)
        stored(None, exc)
