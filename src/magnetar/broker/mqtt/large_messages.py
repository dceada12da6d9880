"""An MQTT message larger than ``max_message_size`` stored as a Pulsar chunked message (PIP 37),
as the official producer would have sent it with chunking on, so that a Pulsar consumer (the
official client reassembles chunks) and MQTT subscribers (``chunks.py``) get it whole.

Each chunk is an entry of its own: the message's metadata (producer name, sequence id, publish
time, properties) with PIP 37's fields, ``uuid`` = ``{producer name}-{sequence id}`` as Pulsar's
producer names it, ``chunk_id``, ``num_chunks_from_msg`` and ``total_chunk_msg_size``; the
payload cut so that each entry (metadata and its part) fits ``max_message_size``. All chunks
carry the message's sequence id and only the last moves the producer's highest one
(deduplication), so a QoS 2 message stays exactly once. The client is answered (PUBACK, PUBREC)
once every chunk is durable; if one fails the message is refused, and the chunks stored before
are left for consumers to drop as incomplete (as with a Pulsar producer that fails mid-message).
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.broker.producer import Producer
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol import wire
from magnetar.protocol.headers import encode_headers_and_payload
from magnetar.storage.position import Position

#: Room per chunk for PIP 37's fields beside the message's own metadata (the uuid aside).
CHUNK_FIELDS_ROOM = 64

Stored = Callable[[Position | None, Exception | None], None]


class ChunkTooSmall(ValueError):
    """The message's metadata alone fills ``max_message_size``: no room for any payload."""


def split(
    metadata: wire.MessageMetadata, payload: bytes, max_size: int
) -> list[tuple[wire.MessageMetadata, bytes]]:
    """The chunks of a message: each one's metadata and its stored bytes (headers, metadata and
    its part of the payload), each within ``max_size`` bytes of metadata and payload."""
    uuid = f"{metadata.producer_name}-{metadata.sequence_id}"
    room = max_size - metadata.ByteSize() - CHUNK_FIELDS_ROOM - len(uuid.encode())
    if room <= 0:
        raise ChunkTooSmall(f"the message's metadata alone fills max_message_size ({max_size} bytes)")
    count = -(-len(payload) // room)
    view = memoryview(payload)
    chunks = []
    for chunk_id in range(count):
        chunk = wire.MessageMetadata()
        chunk.CopyFrom(metadata)
        chunk.uuid = uuid
        chunk.chunk_id = chunk_id
        chunk.num_chunks_from_msg = count
        chunk.total_chunk_msg_size = len(payload)
        part = view[chunk_id * room : (chunk_id + 1) * room]
        chunks.append((chunk, encode_headers_and_payload(chunk, part)))
    return chunks


def store_chunked(
    topic: PersistentTopic,
    producer: Producer,
    metadata: wire.MessageMetadata,
    payload: bytes,
    max_size: int,
    stored: Stored,
) -> int:
    """Store ``payload`` in chunks; ``stored`` is called once: with the last chunk's position when
    every chunk is durable, else with the first failure. The number of chunks."""
    chunks = split(metadata, payload, max_size)
    left = len(chunks)
    answered = False

    def one_stored(position: Position | None, exc: Exception | None) -> None:
        nonlocal left, answered
        if answered:
            return
        if exc is not None:
            answered = True
            stored(None, exc)
            return
        left -= 1
        if left == 0:
            answered = True
            stored(position, None)

    for chunk, data in chunks:
        send = wire.CommandSend(
            producer_id=producer.producer_id, sequence_id=metadata.sequence_id, num_messages=1, is_chunk=True
        )
        try:
            topic.publish(producer, send, memoryview(data), one_stored, chunk)
        except Exception as exc:
            one_stored(None, exc)
            break
    return len(chunks)
