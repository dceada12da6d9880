"""Reassembling chunked messages (PIP 37): a pure state machine, no I/O, no clock.

The consumer feeds every chunk it receives to ``ChunkAssembler.receive(chunk, now_ms)``
and calls ``expire(now_ms)`` from a timer; each call returns a ``ChunkOutcome`` saying
what the consumer must do: hand a completed message to the application, give flow
permits back to the broker, acknowledge chunk ids, or have chunk ids redelivered later.

Rules (the issue's, with the fixes Pulsar learned after the seeds):

* One context per uuid, its buffer preallocated to ``total_chunk_msg_size``; chunks are
  accepted only in order (chunk_id == chunks received so far).
* A chunk 0 for a uuid already pending restarts the message. If that chunk 0 is the
  same entry as one already cached it is a redelivery (nothing to ack: the old chunks
  come again); otherwise the producer sent the message again and the old chunks are
  acknowledged so they leave no ack hole.
* A new message past ``max_pending`` contexts drops the oldest one, whose chunks are
  acknowledged if ``auto_ack_oldest`` else redelivered later.
* A context idle for ``expire_ms`` is dropped and its chunks acknowledged (it can never
  complete: redelivering it would only expire again).
* Discarded: a chunk with chunk_id >= num_chunks (or otherwise malformed), a chunk for
  an unknown uuid, a gap (which also drops its context), a chunk that would overflow
  the buffer. A lone discarded chunk is acknowledged once it is older than
  ``expire_ms`` (by publish time), else redelivered later.
* A duplicate of a chunk already taken is ignored; acknowledged if it is a different
  entry (a re-sent copy), since the original will be acknowledged with the message.
  The same holds after the message completed (the last ``max_completed`` messages are
  remembered): a chunk stored after the message's last one is a re-sent copy and is
  acknowledged (a broker that stores a resent chunk twice, as Pulsar's does, leaves them
  there); one at or before it is an original sent again and is only skipped.
* Flow permits: every chunk that does not complete a message gives its permit back at
  once; the completing chunk's permit returns when the application takes the message.
  Discarding never leaks a permit (Pulsar did, and consumers stalled).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from magnetar.client.message import ChunkMessageId, MessageId


@dataclass(frozen=True, slots=True)
class Chunk:
    """One received chunk: its metadata fields, broker position and payload slice."""

    uuid: str
    chunk_id: int
    num_chunks: int
    total_size: int
    message_id: MessageId
    payload: bytes | memoryview
    publish_time: int = 0


@dataclass(slots=True)
class AssembledMessage:
    """All chunks of one message, in order: the whole (still compressed) payload and their ids."""

    uuid: str
    payload: bytearray
    chunk_ids: list[MessageId]


@dataclass(slots=True)
class ChunkOutcome:
    """What the consumer must do after one step of the assembler."""

    completed: AssembledMessage | None = None
    permits: int = 0
    ack: list[MessageId] = field(default_factory=list)
    redeliver: list[MessageId] = field(default_factory=list)

    def dispose(self, ids: Sequence[MessageId], ack: bool) -> None:
        (self.ack if ack else self.redeliver).extend(ids)


@dataclass(frozen=True, slots=True)
class ChunkProgress:
    """How far a consumer's chunked messages have come (``Consumer.chunk_progress()``)."""

    #: The newest chunk the consumer took in, discarded ones included (None: none yet).
    newest_chunk: MessageId | None
    #: The first chunk's id of every chunked message not handed out yet: being assembled, or
    #: complete and waiting in the receive queue.
    unfinished_first_chunks: tuple[MessageId, ...]
    #: Whether the receive queue is empty (every message completed so far was handed out).
    queue_empty: bool


class _Context:
    """One message being assembled."""

    __slots__ = ("buffer", "chunk_ids", "last_received_ms", "num_chunks", "written")

    def __init__(self, num_chunks: int, total_size: int, now_ms: int) -> None:
        self.num_chunks = num_chunks
        self.buffer = bytearray(total_size)
        self.written = 0
        self.chunk_ids: list[MessageId] = []
        self.last_received_ms = now_ms

    @property
    def next_chunk_id(self) -> int:
        return len(self.chunk_ids)

    def fits(self, payload: bytes | memoryview) -> bool:
        return self.written + len(payload) <= len(self.buffer)

    def append(self, chunk: Chunk, now_ms: int) -> None:
        end = self.written + len(chunk.payload)
        self.buffer[self.written : end] = chunk.payload
        self.written = end
        self.chunk_ids.append(chunk.message_id)
        self.last_received_ms = now_ms

    @property
    def complete(self) -> bool:
        return len(self.chunk_ids) == self.num_chunks

    def holds_entry(self, msg_id: MessageId) -> bool:
        return any(_same_entry(cached, msg_id) for cached in self.chunk_ids)


def _same_entry(a: MessageId, b: MessageId) -> bool:
    return a.ledger_id() == b.ledger_id() and a.entry_id() == b.entry_id() and a.partition() == b.partition()


class ChunkAssembler:
    """Pending chunked messages of one consumer, oldest first."""

    def __init__(
        self,
        max_pending: int = 10,
        auto_ack_oldest: bool = False,
        expire_ms: int = 60_000,
        max_message_bytes: int | None = None,
        max_completed: int = 1000,
    ) -> None:
        self.max_pending = max_pending
        self.auto_ack_oldest = auto_ack_oldest
        self.expire_ms = expire_ms
        #: Refuse to preallocate more than this for one message (None: no limit).
        self.max_message_bytes = max_message_bytes
        self._contexts: OrderedDict[str, _Context] = OrderedDict()
        #: The last chunk of each message completed lately, newest last.
        self._completed: OrderedDict[str, MessageId] = OrderedDict()
        self.max_completed = max_completed
        self._newest: MessageId | None = None

    @property
    def newest_chunk(self) -> MessageId | None:
        """The id of the newest chunk taken in (the latest in the topic), discarded ones included;
        None before the first. ``clear`` does not forget it."""
        return self._newest

    @property
    def pending(self) -> int:
        """Messages being assembled now."""
        return len(self._contexts)

    @property
    def pending_bytes(self) -> int:
        return sum(len(ctx.buffer) for ctx in self._contexts.values())

    def pending_uuids(self) -> list[str]:
        return list(self._contexts)

    def progress(self, queued: Sequence[MessageId]) -> ChunkProgress:
        """``ChunkProgress`` for a consumer whose receive queue holds ``queued``."""
        firsts = [ctx.chunk_ids[0] for ctx in self._contexts.values() if ctx.chunk_ids]
        firsts += [i.first_chunk_message_id() for i in queued if isinstance(i, ChunkMessageId)]
        return ChunkProgress(self._newest, tuple(firsts), not queued)

    def next_expiry_ms(self) -> int | None:
        """When the oldest idle context expires (None: nothing pending or no expiry)."""
        if self.expire_ms <= 0 or not self._contexts:
            return None
        return min(ctx.last_received_ms for ctx in self._contexts.values()) + self.expire_ms

    def clear(self) -> None:
        """Forget every pending message (reconnect, seek): the broker delivers its chunks again."""
        self._contexts.clear()
        self._completed.clear()

    # --- the steps ----------------------------------------------------------------------------------
    def receive(self, chunk: Chunk, now_ms: int) -> ChunkOutcome:
        if self._newest is None or chunk.message_id > self._newest:
            self._newest = chunk.message_id
        out = ChunkOutcome()
        if not _well_formed(chunk):
            self._discard_chunk(out, chunk, now_ms)
        elif chunk.chunk_id == 0:
            self._first_chunk(out, chunk, now_ms)
        else:
            self._next_chunk(out, chunk, now_ms)
        if out.completed is None:
            out.permits += 1
        return out

    def expire(self, now_ms: int) -> ChunkOutcome:
        """Drop (and acknowledge) every context idle for longer than ``expire_ms``."""
        out = ChunkOutcome()
        if self.expire_ms <= 0:
            return out
        for uuid, ctx in list(self._contexts.items()):
            if now_ms > ctx.last_received_ms + self.expire_ms:
                del self._contexts[uuid]
                out.dispose(ctx.chunk_ids, ack=True)
        return out

    # --- the rules ----------------------------------------------------------------------------------
    def _first_chunk(self, out: ChunkOutcome, chunk: Chunk, now_ms: int) -> None:
        if len(chunk.payload) > chunk.total_size or (
            self.max_message_bytes is not None and chunk.total_size > self.max_message_bytes
        ):
            self._discard_chunk(out, chunk, now_ms)
            return
        old = self._contexts.pop(chunk.uuid, None)
        if old is not None and not old.holds_entry(chunk.message_id):
            out.dispose(old.chunk_ids, ack=True)
        if self.max_pending > 0:
            while len(self._contexts) >= self.max_pending:
                _, oldest = self._contexts.popitem(last=False)
                out.dispose(oldest.chunk_ids, ack=self.auto_ack_oldest)
        ctx = _Context(chunk.num_chunks, chunk.total_size, now_ms)
        ctx.append(chunk, now_ms)
        self._contexts[chunk.uuid] = ctx
        self._complete_if_done(out, chunk.uuid, ctx)

    def _next_chunk(self, out: ChunkOutcome, chunk: Chunk, now_ms: int) -> None:
        ctx = self._contexts.get(chunk.uuid)
        if ctx is None:
            last = self._completed.get(chunk.uuid)
            if last is None:
                self._discard_chunk(out, chunk, now_ms)
            elif chunk.message_id > last:  # stored after the message's last chunk
                out.ack.append(chunk.message_id)
            return
        if chunk.chunk_id < ctx.next_chunk_id:
            if not ctx.holds_entry(chunk.message_id):
                out.ack.append(chunk.message_id)
            return
        if (
            chunk.chunk_id > ctx.next_chunk_id
            or chunk.num_chunks != ctx.num_chunks
            or not ctx.fits(chunk.payload)
        ):
            del self._contexts[chunk.uuid]
            self._discard_chunks(out, [*ctx.chunk_ids, chunk.message_id], chunk.publish_time, now_ms)
            return
        ctx.append(chunk, now_ms)
        self._complete_if_done(out, chunk.uuid, ctx)

    def _complete_if_done(self, out: ChunkOutcome, uuid: str, ctx: _Context) -> None:
        if not ctx.complete:
            return
        del self._contexts[uuid]
        self._completed[uuid] = ctx.chunk_ids[-1]
        self._completed.move_to_end(uuid)
        if len(self._completed) > self.max_completed:
            self._completed.popitem(last=False)
        if ctx.written != len(ctx.buffer):
            # Every chunk came but together they are shorter than announced: corrupt for good.
            out.dispose(ctx.chunk_ids, ack=True)
            return
        out.completed = AssembledMessage(uuid, ctx.buffer, ctx.chunk_ids)

    def _discard_chunk(self, out: ChunkOutcome, chunk: Chunk, now_ms: int) -> None:
        self._discard_chunks(out, [chunk.message_id], chunk.publish_time, now_ms)

    def _discard_chunks(
        self, out: ChunkOutcome, ids: list[MessageId], publish_time: int, now_ms: int
    ) -> None:
        """Chunks that can never form a message: ack once stale, else redeliver later."""
        stale = self.expire_ms > 0 and now_ms > publish_time + self.expire_ms
        out.dispose(ids, ack=stale)


def _well_formed(chunk: Chunk) -> bool:
    return (
        chunk.num_chunks > 0
        and 0 <= chunk.chunk_id < chunk.num_chunks
        and chunk.total_size >= 0
        and bool(chunk.uuid)
    )
