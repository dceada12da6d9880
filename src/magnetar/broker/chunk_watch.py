"""What an official C++-based consumer may still hold of chunked messages (PIP 37), and how a
message it may hold part of is sent again so that it assembles it.

pulsar-client-cpp up to 4.2.0 (``pulsar-client`` 3.13 for Python) keeps a partial message, its
chunks by uuid, across a reconnect, a broker restart included, and appends a chunk only if its id
is the number of chunks held (``ConsumerImpl::processMessageChunk``). Sent again from its first
chunk, the message is dropped: chunk 0 finds the old context and is refused ("chunk id is
invalid"), which removes it, and every later chunk finds none ("uncached chunk"). Nothing is
acknowledged, so a consumer without an ack timeout would wait for its next reconnect.

The message's last chunk, sent before its first ("the lead"), completes a context that lacked
only it, removes any other, and is dropped where there is none; the message sent from its first
chunk then assembles, whatever the client held. The lead needs the last chunk stored. Where it
is not yet (its producer was writing the message), the message goes once as usual and then again
whole ("a second pass"): after the first pass no context is left, whichever the client had. So the
message arrives; twice where the client held all chunks but the last (the lead), or held nothing
(the second pass): at-least-once, where the client alone would drop it.

A second pass is queued as positions and sent in slices before anything else for the consumer
(``queued``, drained by its dispatcher), so it never holds a whole message in memory and the
consumer's order is kept.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable

from magnetar.broker.entries import DispatchEntry
from magnetar.protocol import wire
from magnetar.protocol.chunks import ChunkRef, chunk_ref
from magnetar.storage.position import Position

#: How the C++-based official clients name themselves at CONNECT (a ``-description`` may follow).
_CPP_CLIENT = re.compile(r"Pulsar-CPP-v(\d+)\.(\d+)\.(\d+)")
#: The newest pulsar-client-cpp release that keeps partial messages across reconnects.
LAST_KEEPING = (4, 2, 0)
#: Held on an earlier connection: how many chunks is not known.
UNKNOWN = -1
#: Messages one consumer is watched for (the C++ client keeps 10 partial messages by default).
MAX_HELD = 64
#: At most this much of a second pass goes out at once.
SLICE_ENTRIES = 100
SLICE_BYTES = 5 * 1024 * 1024

#: The entry at a position, None once it is acknowledged or cannot be read.
Reader = Callable[[Position], DispatchEntry | None]
#: Where a message's last chunk is stored, None while it is not (or no longer known).
LastChunk = Callable[[wire.MessageMetadata, ChunkRef], Position | None]


def keeps_partial_chunks(client_version: str) -> bool:
    """True for a client (its CONNECT ``client_version``) that keeps partial messages across reconnects."""
    found = _CPP_CLIENT.match(client_version)
    return found is not None and tuple(int(n) for n in found.groups()) <= LAST_KEEPING


def _has_chunk(entries: list[DispatchEntry]) -> bool:
    """Whether any entry is a chunk (a loop: the common case, none, costs a look at each)."""
    for item in entries:
        meta = item.metadata
        if meta is not None and meta.num_chunks_from_msg > 1:
            return True
    return False


class ChunkWatch:
    """One consumer's client, as far as its partial chunked messages go (see the module)."""

    __slots__ = ("_again", "_last_chunk", "_on_leave", "_queue", "_read", "held")

    def __init__(
        self,
        read: Reader,
        last_chunk: LastChunk,
        on_leave: Callable[[ChunkWatch, bool], None],
        held_before: Iterable[str] = (),
    ) -> None:
        self._read = read
        self._last_chunk = last_chunk
        self._on_leave = on_leave
        #: uuid -> the chunk id its client expects next of that incomplete message (UNKNOWN: held
        #: before this connection), oldest first. The client may also have dropped it since.
        self.held: OrderedDict[str, int] = OrderedDict.fromkeys(held_before, UNKNOWN)
        #: uuid -> positions of a first pass, sent again whole once its last chunk went.
        self._again: dict[str, list[Position]] = {}
        #: Positions to send before anything else: second passes, then what came after them.
        self._queue: deque[Position] = deque()

    @property
    def queued(self) -> bool:
        return bool(self._queue)

    def holding(self) -> list[str]:
        """The messages its client may hold part of now."""
        return [*self.held, *self._again]

    def forget_queued(self) -> None:
        """What is queued goes again another way (a rewind, everything given back): drop it."""
        self._queue.clear()

    def leave(self, keep: bool) -> None:
        """The consumer left: ``keep`` when its client may come back holding what it held."""
        self._on_leave(self, keep)

    def through(self, entries: list[DispatchEntry], limit: int) -> list[DispatchEntry]:
        """What to send for ``entries``, in order: behind what is queued (then a slice of at most
        ``limit`` entries of the queue goes instead), each message with the lead or second pass it needs."""
        if self._queue:
            self._queue.extend(item.position for item in entries)
            entries = self._slice(limit)
        elif not _has_chunk(entries):
            return entries
        out: list[DispatchEntry] = []
        for index, item in enumerate(entries):
            chunk = chunk_ref(item.metadata)
            if chunk is None:
                out.append(item)
                continue
            uuid = chunk.uuid
            if chunk.chunk_id == 0 and (uuid in self.held or uuid in self._again):
                self.held.pop(uuid, None)
                lead = self._lead(item, chunk)
                if lead is None:
                    self._again[uuid] = []
                    if len(self._again) > MAX_HELD:
                        del self._again[next(iter(self._again))]
                else:
                    self._again.pop(uuid, None)
                    out.append(lead)
            out.append(item)
            again = self._again.get(uuid)
            if again is None:
                self._note(chunk)
                continue
            again.append(item.position)
            if chunk.last:
                del self._again[uuid]
                rest = (later.position for later in entries[index + 1 :])
                self._queue = deque([*again, *rest, *self._queue])
                break
        return out

    def _lead(self, item: DispatchEntry, chunk: ChunkRef) -> DispatchEntry | None:
        assert item.metadata is not None  # it is a chunk
        position = self._last_chunk(item.metadata, chunk)
        if position is None or position == item.position:
            return None
        return self._read(position)

    def _note(self, chunk: ChunkRef) -> None:
        """The client's context after this chunk, as pulsar-client-cpp 4.2.0 keeps it: a first chunk
        opens one, the expected id adds to it, any other id removes it, and so does completing it."""
        held, uuid = self.held, chunk.uuid
        expected = held.get(uuid)
        if chunk.chunk_id == 0:
            held[uuid] = 1
            held.move_to_end(uuid)
            if len(held) > MAX_HELD:
                held.popitem(last=False)
        elif expected is None:
            return
        elif chunk.last or (expected != UNKNOWN and chunk.chunk_id != expected):
            del held[uuid]
        elif expected != UNKNOWN:
            held[uuid] = expected + 1

    def _slice(self, limit: int) -> list[DispatchEntry]:
        queue, size = self._queue, 0
        out: list[DispatchEntry] = []
        while queue and len(out) < min(limit, SLICE_ENTRIES) and size < SLICE_BYTES:
            item = self._read(queue.popleft())
            if item is not None:
                out.append(item)
                size += len(item.data)
        return out
