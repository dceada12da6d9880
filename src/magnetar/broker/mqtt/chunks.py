"""Chunked messages (PIP 37) put back together for MQTT subscribers, who get one PUBLISH per
message: the broker does what the official Pulsar consumer does in its client.

A consumer's chunks come in order (its subscription is Exclusive, or one consumer of a shared
one gets a whole message's chunks only as the others' allow: Pulsar's own caveat). The chunks
of one message, keyed by producer and uuid, are held (the stored entries, not copies) until the
last comes; the whole message is then handed out as one entry: the first chunk's metadata
without PIP 37's fields, the parts joined, the last chunk's position. Its permits are all its
chunks', and when the client has it (PUBACK, PUBCOMP; or sent, at QoS 0) every chunk is
acknowledged together (``positions``), so a subscription that resumes after a restart gets the
whole message again, never its tail alone.

Dropped, and their chunks acknowledged at once (logged): a chunk out of order or of no message
begun (the Pulsar consumer does the same), a message begun again by its chunk 0, a message
not completed within ``EXPIRE_S`` (the official client's expireTimeOfIncompleteChunkedMessage),
the oldest when a consumer holds more than ``MAX_PENDING`` (its maxPendingChunkedMessage is
10), and one larger than ``max_size``. A completed message is built once for all the
subscribers it goes to (a small cache keyed by its last chunk's entry and its uuid).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from magnetar.broker.entries import DispatchEntry
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.chunks import chunk_ref
from magnetar.protocol.headers import encode_headers_and_payload, parse_metadata
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer

log = logging.getLogger(__name__)

#: Incomplete messages one consumer may hold.
MAX_PENDING = 16
#: An incomplete message dropped after this many seconds without its next chunk.
EXPIRE_S = 60.0
#: Completed messages kept for the other subscribers of the same entries.
_BUILT_MAX = 4
_built: OrderedDict[tuple[str, Position, str, str], DispatchEntry] = OrderedDict()


@dataclass(slots=True)
class _Partial:
    consumer: Consumer
    entries: list[DispatchEntry] = field(default_factory=list)
    last_chunk_at: float = 0.0


class ChunkedMessages:
    """One connection's incomplete chunked messages, per consumer; ``drop(consumer, position)``
    acknowledges a chunk that will never make a message."""

    def __init__(self, drop: Callable[[Consumer, Position], None], max_size: int) -> None:
        self._drop = drop
        self.max_size = max_size
        self._partial: OrderedDict[tuple[int, str, str], _Partial] = OrderedDict()
        #: (consumer id, whole message's position) -> the positions of all its chunks.
        self._whole: dict[tuple[int, Position], list[Position]] = {}

    @property
    def pending(self) -> int:
        return len(self._partial)

    def take(self, consumer: Consumer, entry: DispatchEntry) -> DispatchEntry | None:
        """``entry``, a chunk: the whole message once it is the last, else None (held or dropped)."""
        metadata = entry.metadata
        chunk = chunk_ref(metadata)
        assert metadata is not None and chunk is not None
        now = time.monotonic()
        self._expire(now)
        key = (consumer.consumer_id, metadata.producer_name, chunk.uuid)
        partial = self._partial.get(key)
        if chunk.chunk_id == 0:
            if partial is not None:
                self._discard(key, "its chunk 0 came again")
            if metadata.total_chunk_msg_size > self.max_size:
                log.warning(
                    "%s: a chunked message of %d bytes is over the MQTT limit of %d: not sent",
                    consumer.subscription.topic.name,
                    metadata.total_chunk_msg_size,
                    self.max_size,
                )
                self._drop(consumer, entry.position)
                return None
            partial = self._partial[key] = _Partial(consumer)
            self._make_room(consumer)
        elif (
            partial is None
            or chunk.chunk_id != len(partial.entries)
            or chunk.num_chunks != _num_chunks(partial.entries[0])
        ):
            if partial is not None:
                self._discard(key, f"chunk {chunk.chunk_id} came out of order")
            self._drop(consumer, entry.position)
            return None
        partial.entries.append(entry)
        partial.last_chunk_at = now
        if len(partial.entries) < chunk.num_chunks:
            return None
        del self._partial[key]
        whole = assemble(str(consumer.subscription.topic.name), partial.entries)
        if whole is None:
            for one in partial.entries:
                self._drop(consumer, one.position)
            return None
        self._whole[(consumer.consumer_id, whole.position)] = [one.position for one in partial.entries]
        return whole

    def positions(self, consumer: Consumer, position: Position) -> list[Position]:
        """What acknowledging the entry at ``position`` acknowledges: every chunk of a whole
        message handed out there, else the entry alone."""
        return self._whole.pop((consumer.consumer_id, position), None) or [position]

    def _expire(self, now: float) -> None:
        for key, partial in list(self._partial.items()):
            if partial.consumer.closed:
                del self._partial[key]
            elif now - partial.last_chunk_at > EXPIRE_S:
                self._discard(key, f"no chunk for {EXPIRE_S:.0f} s")

    def _make_room(self, consumer: Consumer) -> None:
        mine = [key for key, partial in self._partial.items() if partial.consumer is consumer]
        for key in mine[: max(0, len(mine) - MAX_PENDING)]:
            self._discard(key, f"over {MAX_PENDING} incomplete messages for one subscriber")

    def _discard(self, key: tuple[int, str, str], why: str) -> None:
        partial = self._partial.pop(key)
        log.warning(
            "%s: the chunked message %s of %s is dropped for MQTT client %s (%s)",
            partial.consumer.subscription.topic.name,
            key[2],
            key[1],
            partial.consumer.name,
            why,
        )
        for entry in partial.entries:
            self._drop(partial.consumer, entry.position)


def _num_chunks(entry: DispatchEntry) -> int:
    return entry.metadata.num_chunks_from_msg if entry.metadata is not None else 0


def assemble(topic: str, entries: list[DispatchEntry]) -> DispatchEntry | None:
    """The whole message of ``entries`` (all its chunks, in order) as one entry; None if their
    parts do not add up to the message's size."""
    first = entries[0].metadata
    assert first is not None
    key = (topic, entries[-1].position, first.producer_name, first.uuid)
    built = _built.get(key)
    if built is not None:
        _built.move_to_end(key)
        return built
    try:
        parts = [parse_metadata(entry.payload_for(False))[1] for entry in entries]
    except ProtocolError as exc:
        log.warning("%s: a chunk at %s does not read: %s", topic, entries[0].position, exc)
        return None
    payload = b"".join(parts)
    if len(payload) != first.total_chunk_msg_size:
        log.warning(
            "%s: the chunks from %s hold %d bytes, not the %d the message has",
            topic,
            entries[0].position,
            len(payload),
            first.total_chunk_msg_size,
        )
        return None
    metadata = wire.MessageMetadata()
    metadata.CopyFrom(first)
    metadata.ClearField("uuid")
    metadata.ClearField("chunk_id")
    metadata.ClearField("num_chunks_from_msg")
    metadata.ClearField("total_chunk_msg_size")
    data = encode_headers_and_payload(metadata, payload)
    built = DispatchEntry(entries[-1].position, data, 0, len(entries), metadata)
    _built[key] = built
    if len(_built) > _BUILT_MAX:
        _built.popitem(last=False)
    return built
