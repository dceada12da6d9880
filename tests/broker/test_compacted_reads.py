"""A readCompacted cursor's reads (``dispatchers/compacted_reads.py``) on a real topic: the view up to
the horizon, then the topic; once past the horizon the view leaves the cursor where it is."""

from __future__ import annotations

from magnetar.broker.dispatchers.compacted_reads import read_compacted
from magnetar.storage import Position
from tests.compaction_entries import single


def _compact(h, topic) -> None:
    async def run() -> None:
        task = topic.compaction.start(None)
        assert task is not None
        await task

    h.run(run())


def test_past_the_horizon_a_read_never_takes_the_cursor_back(harnesses):
    h = harnesses()
    topic = h.topic()
    p = h.publish_all([single(f"k{i % 2}", b"v", sequence_id=i) for i in range(6)])
    _compact(h, topic)
    after = h.publish_all([single("k0", b"after", sequence_id=10 + i) for i in range(2)])
    cursor = topic.ml.new_non_durable_cursor(Position.EARLIEST)
    view = read_compacted(cursor, topic.ml, topic.compaction, 100, 1 << 20)
    assert [e.position for e in view] == p[4:]
    assert read_compacted(cursor, topic.ml, topic.compaction, 100, 1 << 20) is None  # the view is over
    assert cursor.read_position == after[0]
    assert [e.position for e in cursor.read_entries(1)] == [after[0]]  # sent, not acknowledged yet
    assert read_compacted(cursor, topic.ml, topic.compaction, 100, 1 << 20) is None
    assert cursor.read_position == after[1]  # not back to the entry after the horizon: no resend
    assert [e.position for e in cursor.read_entries(10)] == [after[1]]
