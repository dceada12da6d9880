"""Where a topic partition's indexes are: first retained, next to be written, first at a time.

The functions take a blocking ``magnetar.client.Client`` and an ``AdminClient`` (``connect_admin``),
so executors (data-loss checks) and the driver (``BrokerView``, planning) share them. A partition with no
retained message answers None: its indexes are not knowable until a message arrives.
"""

from __future__ import annotations

from collections.abc import Iterable

from magnetar.client import ChunkMessageId, Client, Message, MessageId, Timeout
from magnetar.client.admin import AdminClient, ConflictError, NotFoundError
from magnetar.protocol.topic_name import partition_name
from magnetar.spark.errors import IndexNotEnabledError, UnknownTopicError
from magnetar.spark.options import TopicSelection

FIRST_MESSAGE_TIMEOUT_MS = 5_000
PAST_THE_END_TIMEOUT_MS = 1_000


def entry_key(msg_id: MessageId) -> tuple[int, int]:
    """An entry's place in its partition: (ledger, entry); batch members share it."""
    return msg_id.ledger_id(), msg_id.entry_id()


def index_of_id(admin: AdminClient, topic: str, msg_id: MessageId) -> int | None:
    """Index of the entry ``msg_id`` (its last message for a batch); None if no longer retained."""
    try:
        return admin.index_for_message_id(topic, (msg_id.ledger_id(), msg_id.entry_id()))
    except NotFoundError:
        return None
    except ConflictError as exc:
        raise IndexNotEnabledError(topic, exc.reason) from None


def message_id_at(admin: AdminClient, topic: str, index: int) -> MessageId | None:
    """Id of the message with ``index``; None when it is not retained or not written yet."""
    try:
        return admin.message_id_for_index(topic, index)
    except NotFoundError:
        return None
    except ConflictError as exc:
        raise IndexNotEnabledError(topic, exc.reason) from None


def first_index_of(admin: AdminClient, topic: str, msg: Message) -> int:
    """Index where ``msg`` starts: a chunked message starts at its first chunk."""
    msg_id = msg.message_id()
    if isinstance(msg_id, ChunkMessageId):
        first = index_of_id(admin, topic, msg_id.first_chunk_message_id())
        if first is not None:
            return first
    index = msg.index()
    if index is None:
        raise IndexNotEnabledError(topic, "messages arrive without an index")
    return index


def next_index(admin: AdminClient, topic: str, last_id: MessageId) -> int | None:
    """The index the next message will get, from the partition's last message id."""
    if last_id.entry_id() < 0:
        return None
    last = index_of_id(admin, topic, last_id)
    return None if last is None else last + 1


def first_index(client: Client, admin: AdminClient, topic: str, read_compacted: bool = False) -> int | None:
    """Index of the first retained message; None when none is retained. ``read_compacted``: of the
    first message a compacted read gets (the compacted view's first, which may be older than the
    first retained ledger's)."""
    reader = client.create_reader(
        topic, MessageId.earliest, receiver_queue_size=10, is_read_compacted=read_compacted
    )
    try:
        if reader.get_last_message_id().entry_id() < 0:
            return None
        try:
            msg = reader.read_next(FIRST_MESSAGE_TIMEOUT_MS)
        except Timeout:
            return None
        return first_index_of(admin, topic, msg)
    finally:
        reader.close()


def index_at_time(client: Client, admin: AdminClient, topic: str, timestamp_ms: int) -> int | None:
    """Index of the first message the broker stored at or after ``timestamp_ms`` (broker time);
    the next index to be written when there is none; None when nothing is retained."""
    reader = client.create_reader(topic, MessageId.earliest, receiver_queue_size=10)
    try:
        last_id = reader.get_last_message_id()
        if last_id.entry_id() < 0:
            return None
        reader.seek(timestamp_ms)
        try:
            msg = reader.read_next(PAST_THE_END_TIMEOUT_MS)
        except Timeout:
            return next_index(admin, topic, last_id)
        return first_index_of(admin, topic, msg)
    finally:
        reader.close()


def resolve_partitions(admin: AdminClient, selection: TopicSelection) -> list[str]:
    """The topic partitions (full names) a selection reads, sorted; unknown topics are errors."""
    if selection.pattern is not None:
        pattern = selection.compiled_pattern
        bases = [t for t in admin.base_topics(selection.pattern_namespace) if pattern.fullmatch(t)]
        return sorted(_partitions_of(admin, bases, must_exist=False))
    return sorted(_partitions_of(admin, selection.topics, must_exist=True))


def _partitions_of(admin: AdminClient, topics: Iterable[str], must_exist: bool) -> list[str]:
    found: list[str] = []
    for topic in topics:
        try:
            count = admin.partition_count(topic)
        except NotFoundError as exc:  # no such namespace
            raise UnknownTopicError(f"topic {topic} does not exist: {exc.reason}") from None
        if count > 0:
            found.extend(partition_name(topic, i) for i in range(count))
        elif admin.topic_exists(topic):
            found.append(topic)
        elif must_exist:
            raise UnknownTopicError(
                f"topic {topic} does not exist (the source never creates topics: create it, "
                "or produce to it, first)"
            )
    return found
