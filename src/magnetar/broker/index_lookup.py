"""Look-ups between a message's continuous index (PIP 70) and its message id, both ways.

``message_id_for_index``: binary search over the readable entries by their stored index (the
index of each entry's last message), O(log n) entry reads; inside a batch entry the message
is ``batch_index = index - (entry index - batch size + 1)``.

``index_for_message_id``: one read; the index of message ``batch_index`` of a batch of n is
``entry index - n + batch_index + 1``; a message id without batch index gives the entry's own
index (that of its last message).

Entries stored while the index interceptor was off carry no index: a search steps over them,
so it stays logarithmic unless such entries form long runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.broker.entry_search import (
    EntryReader,
    EntrySpace,
    entry_index,
    first_true,
    message_count,
    read_or_none,
    reader_for,
)
from magnetar.protocol import ProtocolError
from magnetar.protocol import message_id as ids
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata
from magnetar.storage.entry import EntryData
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.topic import PersistentTopic


class IndexLookupError(Exception):
    """A look-up that cannot be answered; ``status`` is the HTTP status the admin API answers."""

    status = 400


class IndexNotEnabled(IndexLookupError):
    status = 409


class NoIndexStored(IndexLookupError):
    status = 409


class IndexNotFound(IndexLookupError):
    status = 404


class MessageNotFound(IndexLookupError):
    status = 404


@dataclass(frozen=True, slots=True)
class IndexedMessage:
    position: Position
    batch_index: int  # -1 when the entry is not a batch
    index: int


def _entry_shape(data: EntryData) -> tuple[int, bool]:
    """(message count, is a batch) of a stored entry."""
    try:
        _, producer_bytes = split_entry_metadata(data)
        metadata, _ = parse_metadata(producer_bytes)
    except ProtocolError:
        return 1, False
    return message_count(metadata), metadata.HasField("num_messages_in_batch")


def find_index(ml: ManagedLedger, index: int, read: EntryReader | None = None) -> IndexedMessage:
    """Where the message with ``index`` is stored (raises IndexNotFound)."""
    if index < 0:
        raise IndexNotFound(f"index {index} is negative: indexes start at 0")
    read = reader_for(ml, read)
    space = EntrySpace(ml)
    indexes: dict[int, int | None] = {}  # ordinal -> stored index (None: stored without)
    datas: dict[int, EntryData] = {}  # entries with an index that the search read

    def indexed_at_or_after(ordinal: int) -> tuple[int, int] | None:
        """Ordinal and index of the first entry at or after ``ordinal`` that carries an index."""
        while ordinal < space.size:
            if ordinal not in indexes:
                data = read_or_none(read, space.position(ordinal))  # None: damaged, passed over
                indexes[ordinal] = entry_index(data) if data is not None else None
                if data is not None and indexes[ordinal] is not None:
                    datas[ordinal] = data
            if (stored := indexes[ordinal]) is not None:
                return ordinal, stored
            ordinal += 1
        return None

    def at_or_after(ordinal: int) -> bool:
        found = indexed_at_or_after(ordinal)
        return found is None or found[1] >= index

    indexed = indexed_at_or_after(first_true(space.size, at_or_after))
    if indexed is None:
        raise IndexNotFound(f"index {index} is past the last message stored on {ml.name}")
    found, last_index = indexed
    count, is_batch = _entry_shape(datas[found])
    first_index = last_index - count + 1
    if index < first_index:
        raise IndexNotFound(
            f"index {index} is not stored on {ml.name}: the oldest indexed message has index {first_index}"
        )
    position = space.position(found)
    return IndexedMessage(position, index - first_index if is_batch else -1, index)


def index_of(
    ml: ManagedLedger, position: Position, batch_index: int = -1, read: EntryReader | None = None
) -> int:
    """The index of the message at ``position`` (and ``batch_index`` inside a batch)."""
    if not ml.has_entry(position):
        raise MessageNotFound(f"no message {position} on {ml.name}")
    data = read_or_none(reader_for(ml, read), position)
    if data is None:
        raise MessageNotFound(f"message {position} on {ml.name} is damaged: reads pass over it")
    last_index = entry_index(data)
    if last_index is None:
        raise NoIndexStored(
            f"message {position} was stored without an index (the index interceptor was off then)"
        )
    count, is_batch = _entry_shape(data)
    if batch_index < 0:
        return last_index
    if batch_index >= (count if is_batch else 1):
        raise MessageNotFound(f"entry {position} holds {count} message(s): no batch index {batch_index}")
    return last_index - count + batch_index + 1


# -- the topic-level checks the admin API and the broker use ----------------------------------------


def _require_index(topic: PersistentTopic) -> None:
    if not topic.index_enabled:
        raise IndexNotEnabled(
            f"the index broker entry metadata interceptor is not enabled, so {topic.name} has no "
            'message index: add "index" to broker_entry_metadata_interceptors'
        )


def message_id_for_index(
    topic: PersistentTopic, index: int, read: EntryReader | None = None
) -> IndexedMessage:
    _require_index(topic)
    return find_index(topic.ml, index, read)


def index_for_message_id(
    topic: PersistentTopic, position: Position, batch_index: int = -1, read: EntryReader | None = None
) -> int:
    _require_index(topic)
    return index_of(topic.ml, position, batch_index, read)


def message_id_json(topic: PersistentTopic, found: IndexedMessage) -> dict[str, int]:
    position = found.position
    body = ids.message_id_json(
        position.ledger_id, position.entry_id, found.batch_index, topic.partition_index
    )
    return {**body, "index": found.index}


__all__ = [
    "IndexLookupError",
    "IndexNotEnabled",
    "IndexNotFound",
    "IndexedMessage",
    "MessageNotFound",
    "NoIndexStored",
    "find_index",
    "index_for_message_id",
    "index_of",
    "message_id_for_index",
    "message_id_json",
]
