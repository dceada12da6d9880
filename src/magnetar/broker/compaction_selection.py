"""Phase one of Pulsar's two-phase compactor: which messages the compacted view keeps.

Pure: given the entries up to the compaction horizon (the previous compacted ledger's, then the
topic's after the previous horizon), in order, it finds the latest message of each key. A message
without a key is kept out; an empty message with a key (a tombstone) removes the key; a batch is
looked at message by message; a chunked message counts once its last chunk is read, with that
chunk's key, and is kept whole (every chunk's entry) or not at all. A chunked message still
incomplete at the horizon would be kept in half, so the horizon stops before its first chunk
(``Selection.stop_before``) unless its producer went on with other messages (it never completes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from magnetar.protocol.compaction import EntryFacts, KeyedMessage
from magnetar.storage.position import Position

#: A whole entry is kept (not a batch's subset).
WHOLE = None


@dataclass(slots=True)
class _Latest:
    """The latest message of a key: its entries (several for a chunked message) and its batch index
    (-1: the whole entry) of a batch of ``batch_size`` messages."""

    positions: tuple[Position, ...]
    index: int
    batch_size: int


@dataclass(slots=True)
class Selection:
    """What phase one chose: for each entry kept, WHOLE or the batch indexes kept, with the batch's
    size; the last position looked at (the horizon; None: nothing); messages looked at and kept.
    ``stop_before``: the first chunk of a chunked message incomplete at the end (compact again
    with the entries before it only)."""

    kept: dict[Position, tuple[frozenset[int] | None, int]] = field(default_factory=dict)
    horizon: Position | None = None
    messages: int = 0
    kept_messages: int = 0
    stop_before: Position | None = None

    def keeps_whole(self, position: Position) -> bool | None:
        """True: copy the entry as it is; False: rewrite it with ``indexes(position)``; None: drop it."""
        chosen = self.kept.get(position)
        if chosen is None:
            return None
        indexes, size = chosen
        return indexes is WHOLE or len(indexes) == size


def select(entries: Iterable[tuple[Position, EntryFacts]], end: Position | None = None) -> Selection:
    """Phase one over ``entries`` (in position order), those at or after ``end`` left out."""
    latest: dict[str, _Latest] = {}
    open_chunks: dict[str, list[Position]] = {}
    open_of_producer: dict[str, str] = {}
    selection = Selection()
    for position, facts in entries:
        if end is not None and position >= end:
            break
        selection.horizon = position
        chunk = facts.chunk
        producer_open = open_of_producer.get(facts.producer)
        if producer_open is not None and (chunk is None or chunk.uuid != producer_open):
            # The producer went on without finishing it: that chunked message never completes.
            open_chunks.pop(producer_open, None)
            del open_of_producer[facts.producer]
        if chunk is None:
            selection.messages += len(facts.messages)
            for index, message in enumerate(facts.messages):
                _note(latest, message, (position,), index if facts.batch else -1, len(facts.messages))
            continue
        positions = open_chunks.get(chunk.uuid)
        if chunk.chunk_id == 0:
            positions = open_chunks[chunk.uuid] = [position]
            open_of_producer[facts.producer] = chunk.uuid
        elif positions is None or chunk.chunk_id != len(positions):
            # Its first chunk is not here (before the view began) or a chunk is missing: never half a message.
            open_chunks.pop(chunk.uuid, None)
            open_of_producer.pop(facts.producer, None)
            continue
        else:
            positions.append(position)
        if chunk.last:
            del open_chunks[chunk.uuid]
            open_of_producer.pop(facts.producer, None)
            selection.messages += 1
            _note(latest, facts.messages[0], tuple(positions), -1, 1)
    if open_chunks:
        selection.stop_before = min(positions[0] for positions in open_chunks.values())
    for chosen in latest.values():
        selection.kept_messages += 1
        if chosen.index == -1:
            for position in chosen.positions:
                selection.kept[position] = (WHOLE, 1)
            continue
        position = chosen.positions[0]
        before = selection.kept.get(position)
        indexes = before[0] if before is not None and before[0] is not None else frozenset()
        selection.kept[position] = (indexes | {chosen.index}, chosen.batch_size)
    return selection


def _note(
    latest: dict[str, _Latest], message: KeyedMessage, positions: tuple[Position, ...], index: int, size: int
) -> None:
    key = message.key
    if key is None:
        return
    if message.empty:
        latest.pop(key, None)
    else:
        latest[key] = _Latest(positions, index, size)
