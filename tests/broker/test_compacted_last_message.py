"""The last message id a readCompacted consumer is told (GET_LAST_MESSAGE_ID): while the compacted
view covers the whole topic, the view's last kept message, as Pulsar's broker answers; otherwise
the topic's last. A reader's ``has_message_available`` (and the TableView's start) waits for it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.compacted_topic import CompactionStatus, last_kept_index
from magnetar.storage.position import Position
from tests.compaction_entries import batch, single


def _compact(h, topic) -> None:
    async def run() -> None:
        task = topic.compaction.start(None)
        assert task is not None
        await task

    h.run(run())
    assert topic.compaction.status is CompactionStatus.SUCCESS, topic.compaction.last_error


def test_a_topic_ending_in_a_tombstone_answers_the_views_last_message(harnesses):
    h = harnesses()
    topic = h.topic()
    p = h.publish_all([single("a", b"a1"), single("b", b"b1"), single("a", b"")])
    assert topic.last_message_position(read_compacted=True) == (p[2], -1)  # no view yet: the topic's
    _compact(h, topic)
    assert topic.last_message_position(read_compacted=True) == (p[1], -1)
    assert topic.last_message_position() == (p[2], -1)  # a consumer reading everything waits for it
    later = h.publish_all([single(None, b"keyless, after the horizon")])
    assert topic.last_message_position(read_compacted=True) == (later[0], -1)  # read from the topic


def test_a_batch_answers_the_index_of_its_last_kept_message(harnesses):
    h = harnesses()
    topic = h.topic()
    p = h.publish_all([batch([("a", b"a1"), ("b", b"b1"), ("c", b"c1"), (None, b"x"), ("b", b"")])])
    _compact(h, topic)
    assert topic.last_message_position(read_compacted=True) == (p[0], 2)  # c1; b and the keyless one are out
    assert topic.last_message_position() == (p[0], 4)


def test_a_view_with_nothing_left_answers_the_earliest(harnesses):
    h = harnesses()
    topic = h.topic()
    h.publish_all([single("a", b"a1"), single("a", b""), single(None, b"keyless")])
    _compact(h, topic)
    assert topic.last_message_position(read_compacted=True) == (Position.EARLIEST, -1)


@given(st.lists(st.booleans(), min_size=1, max_size=200))
def test_the_last_kept_index_is_the_highest_kept_place(kept):
    entry = batch([("k" if keep else None, b"v") for keep in kept])
    expected = max((i for i, keep in enumerate(kept) if keep), default=-1)
    assert last_kept_index(entry) == expected


def test_a_single_message_or_an_unreadable_entry_has_no_batch_index():
    assert last_kept_index(single("a", b"v")) == -1
    assert last_kept_index(b"\x00\x01 not an entry") == -1
