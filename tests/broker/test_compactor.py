"""The two-phase compactor on a real topic and real files: the compacted view, its switch, what a
crash leaves, and the ``__compaction`` cursor holding back trimming."""

from __future__ import annotations

from magnetar.broker import compactor
from magnetar.broker.compacted_topic import COMPACTION_SUBSCRIPTION, PROPERTIES_KEY, CompactionStatus
from magnetar.protocol.compaction import entry_facts
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata
from magnetar.storage.compacted_ledger import compacted_directory
from tests.compaction_entries import batch, single


def _run_compaction(h, topic) -> None:
    async def run() -> None:
        task = topic.compaction.start(None)
        assert task is not None
        assert topic.compaction.start(None) is None  # one at a time (the admin API's 409)
        await task

    h.run(run())


def _compact(h, topic):
    _run_compaction(h, topic)
    assert topic.compaction.status is CompactionStatus.SUCCESS, topic.compaction.last_error
    return topic.compaction.view


def _view(topic) -> list[tuple[object, str | None, bytes]]:
    """(position, key, payload) of each message of the compacted view (batches: each message kept)."""
    out = []
    for entry in topic.compaction.view.ledger.all_entries():
        facts = entry_facts(entry.data)
        _, producer_bytes = split_entry_metadata(entry.data)
        _, payload = parse_metadata(producer_bytes)
        if not facts.batch:
            out.append((entry.position, facts.messages[0].key, bytes(payload)))
            continue
        out.extend((entry.position, m.key, b"") for m in facts.messages if m.key is not None)
    return out


def test_a_topic_of_100_messages_over_5_keys_compacts_to_the_last_of_each(harnesses):
    h = harnesses()
    topic = h.topic()
    positions = h.publish_all([single(f"k{i % 5}", f"v{i}".encode(), sequence_id=i) for i in range(100)])
    view = _compact(h, topic)
    assert view.horizon == positions[-1]
    assert _view(topic) == [(positions[95 + i], f"k{i}", f"v{95 + i}".encode()) for i in range(5)]
    assert topic.compaction.record.last_removed_event_count == 95
    assert topic.compaction.cursor.mark_delete_position == positions[-1]
    assert COMPACTION_SUBSCRIPTION not in topic.subscriptions


def test_tombstones_remove_keys_keyless_messages_stay_out_and_batches_are_cut_to_what_is_kept(harnesses):
    h = harnesses()
    topic = h.topic()
    p = h.publish_all(
        [
            single("a", b"a1"),
            single(None, b"no key"),
            batch([("b", b"b1"), ("a", b"a2"), (None, b"x"), ("c", b"c1")]),
            single("c", b""),  # tombstone
            single("b", b"b2"),
        ]
    )
    _compact(h, topic)
    entries = topic.compaction.view.ledger.all_entries()
    assert [e.position for e in entries] == [p[2], p[4]]
    facts = entry_facts(entries[0].data)  # the batch keeps its four places; only "a" is left
    assert [m.key for m in facts.messages] == [None, "a", None, None]


def test_a_second_compaction_builds_on_the_first_and_deletes_its_ledger(harnesses):
    h = harnesses()
    topic = h.topic()
    first = h.publish_all([single("a", b"1"), single("b", b"1")])
    old = _compact(h, topic).ledger.ledger_id
    second = h.publish_all([single("a", b"2"), single("c", b"")])
    view = _compact(h, topic)
    assert [(pos, key) for pos, key, _ in _view(topic)] == [(first[1], "b"), (second[0], "a")]
    assert view.horizon == second[1]
    names = sorted(p.name for p in compacted_directory(topic.ml.directory).iterdir())
    assert names == [f"{view.ledger.ledger_id:020d}.idx", f"{view.ledger.ledger_id:020d}.log"]
    assert old != view.ledger.ledger_id


def test_nothing_new_leaves_the_view_as_it_was(harnesses):
    h = harnesses()
    topic = h.topic()
    h.publish_all([single("a", b"1")])
    view = _compact(h, topic)
    assert _compact(h, topic) is view


def test_the_view_survives_a_restart_and_the_compaction_cursor_is_no_subscription(harnesses, tmp_path):
    h = harnesses()
    positions = h.publish_all([single("a", b"1"), single("a", b"2")])
    _compact(h, h.topic())
    h.close()
    again = harnesses()
    topic = again.topic()
    assert topic.compaction.horizon == positions[-1]
    assert [e.position for e in topic.compaction.view.ledger.all_entries()] == [positions[1]]
    assert COMPACTION_SUBSCRIPTION not in topic.subscriptions


def test_a_crash_after_phase_two_before_the_switch_leaves_the_previous_view(harnesses):
    h = harnesses()
    topic = h.topic()
    first = h.publish_all([single("a", b"1")])
    _compact(h, topic)
    h.publish_all([single("a", b"2")])
    outcome = compactor.compact(topic.ml, topic.compaction.view)  # phase two done, nothing recorded
    assert outcome is not None
    h.crash()
    again = harnesses()
    view = again.topic().compaction.view
    assert [e.position for e in view.ledger.all_entries()] == [first[0]]
    directory = compacted_directory(again.topic().ml.directory)
    assert not any(p.name.startswith(f"{outcome.ledger_id:020d}") for p in directory.iterdir())


def test_a_crash_after_the_switch_before_the_cursor_moved_moves_it_on_load(harnesses):
    h = harnesses()
    topic = h.topic()
    positions = h.publish_all([single("a", b"1"), single("b", b"1")])
    _compact(h, topic)
    cursor = topic.compaction.cursor
    cursor.reset(positions[0])  # as if its move had not been persisted
    topic.ml.persist_cursors([cursor])
    h.crash()
    again = harnesses()
    topic = again.topic()
    assert topic.ml.get_property(PROPERTIES_KEY) is not None
    assert topic.compaction.cursor.mark_delete_position == positions[-1]


def test_the_compaction_cursor_holds_back_trimming_and_retention_never_deletes_the_view(harnesses):
    h = harnesses(max_ledger_size_bytes=200, retention_time_seconds=0, retention_size_bytes=0)
    topic = h.topic()
    before = h.publish_all([single(f"k{i % 3}", b"x" * 50, sequence_id=i) for i in range(12)])
    _run_compaction(h, topic)
    after = h.publish_all([single("k0", b"y" * 50, sequence_id=100 + i) for i in range(6)])
    topic.trim()
    remaining = {info.ledger_id for info in topic.ml.ledgers()}
    assert before[-1].ledger_id not in remaining or before[-1].ledger_id == after[0].ledger_id
    assert {p.ledger_id for p in after} <= remaining  # not compacted yet: held back
    assert [e.position for e in topic.compaction.view.ledger.all_entries()] == before[-3:]
