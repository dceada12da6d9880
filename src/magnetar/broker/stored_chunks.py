"""The chunks of recent chunked messages (PIP 37) a topic stored, so none is stored twice.

A producer whose connection is lost sends again every SEND it has no receipt for. For a
chunked message some of those chunks may be stored already (their receipts were lost with
the connection, or with the broker); storing them again leaves the topic holding chunk ids
such as 0..41, 20..69, and the official consumers then drop the whole message although its
send succeeded. Sequence-id deduplication cannot tell the copies apart (every chunk carries
its message's sequence id), and Pulsar has that hole. So a chunk is recognised by its
producer, the message's uuid and its chunk id, and a chunk sent again is answered with the
receipt of the stored one (or, while that one is still being stored, with its outcome).

A message is the same message only if its number of chunks, total size, publish time and
sequence id are the same: a producer restarted under the same name reuses uuids (they are
``{producer name}-{sequence id}``), and its new message must not be taken for the old one.

Bounded: the newest ``max_chunks`` chunks are kept (a producer's chunks in flight are far
fewer), older messages are forgotten first. The whole record goes into the topic's state
snapshot, so it survives a restart, kill -9 included (recovery replays what came after).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from magnetar.protocol import wire
from magnetar.protocol.chunks import ChunkRef
from magnetar.storage.position import Position

#: Chunks remembered per topic.
MAX_CHUNKS = 10_000

StoredCallback = Callable[[Position | None, Exception | None], None]
#: What identifies one message among those with the same producer and uuid.
Fingerprint = tuple[int, int, int, int]


def fingerprint(metadata: wire.MessageMetadata) -> Fingerprint:
    return (
        metadata.num_chunks_from_msg,
        metadata.total_chunk_msg_size,
        metadata.publish_time,
        metadata.sequence_id,
    )


class ChunkedMessage:
    """The chunks of one message stored so far, and those being stored now."""

    __slots__ = ("fingerprint", "in_flight", "key", "positions")

    def __init__(self, key: tuple[str, str], fp: Fingerprint) -> None:
        #: (producer name, uuid)
        self.key = key
        self.fingerprint = fp
        #: chunk id -> where it is stored (the first copy).
        self.positions: dict[int, Position] = {}
        #: chunk id -> callbacks of copies sent again while the first is being stored.
        self.in_flight: dict[int, list[StoredCallback]] = {}

    def __len__(self) -> int:
        return len(self.positions) + len(self.in_flight)


class StoredChunks:
    """Recent chunked messages of one topic, by (producer name, uuid), oldest first."""

    def __init__(self, max_chunks: int = MAX_CHUNKS) -> None:
        self.max_chunks = max_chunks
        #: Made at the first chunked message (an empty OrderedDict costs 128 bytes per topic; most
        #: topics never see a chunk, issue 40).
        self._messages: OrderedDict[tuple[str, str], ChunkedMessage] | None = None
        self._chunks = 0

    @property
    def chunks(self) -> int:
        """Chunks remembered (stored or being stored)."""
        return self._chunks

    def answer_resend(
        self, metadata: wire.MessageMetadata, chunk: ChunkRef, callback: StoredCallback
    ) -> bool:
        """If this chunk was stored or is being stored, answer ``callback`` with that copy's
        outcome (now, or once known) and return True; False: it is new, store it."""
        message = self._find(metadata, chunk)
        if message is None:
            return False
        position = message.positions.get(chunk.chunk_id)
        if position is not None:
            callback(position, None)
            return True
        waiting = message.in_flight.get(chunk.chunk_id)
        if waiting is not None:
            waiting.append(callback)
            return True
        return False

    def position(self, metadata: wire.MessageMetadata, chunk: ChunkRef, chunk_id: int) -> Position | None:
        """Where chunk ``chunk_id`` of the message ``chunk`` belongs to is stored; None while it is
        not, or once the message is forgotten."""
        message = self._find(metadata, chunk)
        return None if message is None else message.positions.get(chunk_id)

    def storing(self, metadata: wire.MessageMetadata, chunk: ChunkRef) -> ChunkedMessage:
        """A new chunk is being stored: copies sent meanwhile wait for it. Returns the record to
        pass to ``stored`` (it stays valid even if it is forgotten meanwhile)."""
        message = self._record(metadata, chunk)
        message.in_flight[chunk.chunk_id] = []
        self._chunks += 1
        self._bound()
        return message

    def stored(
        self,
        message: ChunkedMessage,
        chunk: ChunkRef,
        position: Position | None,
        exc: Exception | None = None,
    ) -> None:
        """The chunk ``storing`` announced is durable at ``position`` (or failed with ``exc``);
        copies that waited for it get the same answer."""
        waiting = message.in_flight.pop(chunk.chunk_id, None) or []
        if position is not None and exc is None:
            message.positions.setdefault(chunk.chunk_id, position)
        elif self._messages is not None and self._messages.get(message.key) is message:
            # still counted: not forgotten meanwhile
            self._chunks -= 1
        for callback in waiting:
            callback(position, exc)

    def recover(self, metadata: wire.MessageMetadata, chunk: ChunkRef, position: Position) -> None:
        """A chunk found stored when the topic is loaded (the first copy of each chunk wins)."""
        message = self._record(metadata, chunk)
        if chunk.chunk_id not in message.positions:
            message.positions[chunk.chunk_id] = position
            self._chunks += 1
            self._bound()

    # -- snapshot ---------------------------------------------------------------------------
    def snapshot(self) -> list[list]:
        """JSON-ready: per message its producer, uuid, fingerprint and runs of positions
        ``[first chunk id, ledger id, first entry id, count]`` (chunks stored back to back
        take one run)."""
        out = []
        for (producer, uuid), message in (self._messages or {}).items():
            if message.positions:
                out.append([producer, uuid, *message.fingerprint, _runs(message.positions)])
        return out

    def restore(self, snapshot: list[list]) -> None:
        for producer, uuid, num_chunks, total, publish_time, sequence_id, runs in snapshot:
            message = ChunkedMessage((producer, uuid), (num_chunks, total, publish_time, sequence_id))
            for chunk_id, ledger_id, entry_id, count in runs:
                for i in range(count):
                    message.positions[chunk_id + i] = Position(ledger_id, entry_id + i)
            self._table()[(producer, uuid)] = message
            self._chunks += len(message.positions)
        self._bound()

    # -- the records --------------------------------------------------------------------------
    def _find(self, metadata: wire.MessageMetadata, chunk: ChunkRef) -> ChunkedMessage | None:
        if self._messages is None:
            return None
        message = self._messages.get((metadata.producer_name, chunk.uuid))
        if message is None or message.fingerprint != fingerprint(metadata):
            return None
        return message

    def _record(self, metadata: wire.MessageMetadata, chunk: ChunkRef) -> ChunkedMessage:
        """The message's record, newest now; a different message under the same uuid replaces it."""
        key = (metadata.producer_name, chunk.uuid)
        fp = fingerprint(metadata)
        messages = self._table()
        message = messages.get(key)
        if message is None or message.fingerprint != fp:
            if message is not None:
                self._chunks -= len(message)
            message = messages[key] = ChunkedMessage(key, fp)
        messages.move_to_end(key)
        return message

    def _table(self) -> OrderedDict[tuple[str, str], ChunkedMessage]:
        if self._messages is None:
            self._messages = OrderedDict()
        return self._messages

    def _bound(self) -> None:
        messages = self._table()
        while self._chunks > self.max_chunks and len(messages) > 1:
            _, oldest = messages.popitem(last=False)
            self._chunks -= len(oldest)


def _runs(positions: dict[int, Position]) -> list[list[int]]:
    runs: list[list[int]] = []
    for chunk_id in sorted(positions):
        p = positions[chunk_id]
        if runs:
            first_id, ledger_id, first_entry, count = runs[-1]
            if (
                chunk_id == first_id + count
                and p.ledger_id == ledger_id
                and p.entry_id == first_entry + count
            ):
                runs[-1][3] += 1
                continue
        runs.append([chunk_id, p.ledger_id, p.entry_id, 1])
    return runs
