"""Index <-> message id look-ups over real storage: answers, errors, and O(log n) reads."""

from __future__ import annotations

import math

import pytest

from magnetar.broker.entry_search import CountingReader, EntrySpace
from magnetar.broker.index_lookup import (
    IndexNotEnabled,
    IndexNotFound,
    MessageNotFound,
    NoIndexStored,
    find_index,
    index_for_message_id,
    index_of,
    message_id_for_index,
    message_id_json,
)
from magnetar.storage import Position

from .entry_harness import batch, message


def expected_ids(positions: list[Position], sizes: list[int]) -> list[tuple[Position, int]]:
    """(position, batch index) of every message, in index order; sizes 0 mean a plain message."""
    out = []
    for position, size in zip(positions, sizes, strict=True):
        out += [(position, -1)] if size == 0 else [(position, i) for i in range(size)]
    return out


@pytest.fixture
def filled(harnesses):
    """A topic over several ledgers: plain messages and batches of 2..5."""
    h = harnesses(max_ledger_size_bytes=500)
    sizes = [0 if i % 4 else 2 + i % 5 for i in range(80)]
    datas = [
        message(b"m%d" % i) if s == 0 else batch([b"b%d-%d" % (i, j) for j in range(s)])
        for i, s in enumerate(sizes)
    ]
    positions = h.publish_all(datas)
    assert len({p.ledger_id for p in positions}) > 3
    return h, expected_ids(positions, sizes)


def test_message_id_for_every_index(filled):
    h, ids = filled
    topic = h.topic()
    for index, (position, batch_index) in enumerate(ids):
        found = message_id_for_index(topic, index)
        assert (found.position, found.batch_index, found.index) == (position, batch_index, index)


def test_index_for_every_message_id(filled):
    h, ids = filled
    topic = h.topic()
    for index, (position, batch_index) in enumerate(ids):
        assert index_for_message_id(topic, position, batch_index) == index


def test_a_batch_entry_without_batch_index_answers_its_last_message(filled):
    h, ids = filled
    position, _ = ids[0]  # entry 0 is a batch of 2
    assert index_of(h.topic().ml, position) == 1


def test_json_form(filled):
    h, ids = filled
    topic = h.topic()
    position, batch_index = ids[5]
    assert message_id_json(topic, message_id_for_index(topic, 5)) == {
        "ledgerId": position.ledger_id,
        "entryId": position.entry_id,
        "batchIndex": batch_index,
        "partition": -1,
        "index": 5,
    }


def test_reads_are_logarithmic(harnesses):
    h = harnesses(max_ledger_size_bytes=8192)
    n = 3000
    positions = h.publish_all([message(b"%d" % i) for i in range(n)])
    ml = h.topic().ml
    assert EntrySpace(ml).size == n
    limit = math.ceil(math.log2(n + 1)) + 1  # 13, where a scan reads up to 3000
    for index in (0, 1, 1499, 2998, 2999):
        reader = CountingReader(ml)
        assert find_index(ml, index, reader).position == positions[index]
        assert reader.reads <= limit, reader.reads
    reader = CountingReader(ml)
    assert index_of(ml, positions[1234], -1, reader) == 1234
    assert reader.reads == 1


def test_out_of_range(filled):
    h, ids = filled
    topic = h.topic()
    for bad in (-1, len(ids), len(ids) + 1000):
        with pytest.raises(IndexNotFound):
            message_id_for_index(topic, bad)


def test_unknown_message_ids(filled):
    h, ids = filled
    topic = h.topic()
    last = ids[-1][0]
    for position, batch_index in [
        (Position(last.ledger_id, last.entry_id + 1), -1),  # not written yet
        (Position(999_999, 0), -1),  # no such ledger
        (ids[0][0], 2),  # entry 0 is a batch of 2
        (ids[2][0], 1),  # a plain message has no batch index 1
    ]:
        with pytest.raises(MessageNotFound):
            index_for_message_id(topic, position, batch_index)


def test_empty_topic(harnesses):
    topic = harnesses().topic()
    with pytest.raises(IndexNotFound):
        message_id_for_index(topic, 0)


def test_index_interceptor_off_is_a_clear_error(harnesses):
    h = harnesses(broker_entry_metadata_interceptors=["broker_timestamp"])
    position = h.publish(message(b"x"))
    with pytest.raises(IndexNotEnabled, match="index"):
        message_id_for_index(h.topic(), 0)
    with pytest.raises(IndexNotEnabled, match="broker_entry_metadata_interceptors"):
        index_for_message_id(h.topic(), position)


def test_trimmed_indexes_are_not_found(harnesses):
    h = harnesses(max_ledger_size_bytes=300)
    positions = h.publish_all([message(b"%d" % i) for i in range(30)])
    assert h.topic().trim()
    first = h.topic().ml.first_position()
    oldest = positions.index(first)
    with pytest.raises(IndexNotFound, match=f"oldest indexed message has index {oldest}"):
        message_id_for_index(h.topic(), oldest - 1)
    assert message_id_for_index(h.topic(), oldest).position == first


def test_entries_without_index_are_stepped_over(harnesses):
    h = harnesses()
    first = h.publish_all([message(b"a"), batch([b"b", b"c"])])  # indexes 0, 1..2
    h.close()
    h = harnesses(broker_entry_metadata_interceptors=[])
    gap = h.publish_all([message(b"x%d" % i) for i in range(5)])
    h.close()
    h = harnesses()
    last = h.publish_all([message(b"d"), batch([b"e", b"f", b"g"])])  # indexes 3, 4..6
    topic = h.topic()
    assert [message_id_for_index(topic, i).position for i in range(7)] == [
        first[0],
        first[1],
        first[1],
        last[0],
        last[1],
        last[1],
        last[1],
    ]
    assert message_id_for_index(topic, 5).batch_index == 1
    with pytest.raises(NoIndexStored, match="stored without an index"):
        index_for_message_id(topic, gap[2])
    with pytest.raises(IndexNotFound):
        message_id_for_index(topic, 7)
