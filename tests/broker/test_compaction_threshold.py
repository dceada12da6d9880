"""Compaction by threshold, its record and its checkpoints, without a network: which threshold
applies, Pulsar's backlog estimate, the housekeeping pass that starts compactions, the compaction
record's figures, a compaction stopped (or held by the test-only pause), and where a seek on a
compacted read lands."""

from __future__ import annotations

import asyncio
import threading

import pytest

from magnetar.broker import housekeeping
from magnetar.broker.compacted_topic import COMPACTION_SUBSCRIPTION, CompactionStatus
from magnetar.broker.compaction_pause import CompactionCheckpoints, CompactionStopped
from magnetar.broker.compaction_policies import (
    TopicCompactionThresholds,
    applied_threshold,
    backlog_estimate,
    parse_threshold,
)
from magnetar.broker.compaction_stats import CompactionRecord
from magnetar.broker.errors import NotAllowed
from magnetar.protocol import wire
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.compacted_ledger import compacted_directory
from magnetar.storage.position import Position
from tests.compaction_entries import single
from tests.waiting import eventually_async


def test_the_topics_threshold_wins_then_the_namespaces_then_the_brokers():
    assert applied_threshold(None, None, 7) == 7
    assert applied_threshold(None, 0, 7) == 0  # the namespace turned it off
    assert applied_threshold(5, 0, 7) == 5
    assert applied_threshold(0, 100, 7) == 0  # the topic turned it off


def test_a_threshold_is_a_whole_number_of_bytes_not_negative():
    assert parse_threshold(0) == 0
    assert parse_threshold(10 * 1024**2) == 10 * 1024**2
    with pytest.raises(NotAllowed, match="compactionThreshold must be 0 or more"):
        parse_threshold(-1)
    for bad in ("10M", 1.5, True, None):
        with pytest.raises(ValueError):
            parse_threshold(bad)


def test_topic_thresholds_are_stored_by_topic_and_a_partitioned_topics_apply_to_its_partitions(harnesses):
    store = TopicCompactionThresholds(harnesses().storage.metadata)
    topic = TopicName.parse("persistent://public/default/t")
    other = TopicName.parse("persistent://public/default/u")
    assert store.get(topic) is None and store.all() == {}
    store.set(topic, 100)
    store.set(other, 0)
    assert store.get(topic.partition(3)) == 100
    assert store.all() == {str(topic): 100, str(other): 0}
    assert store.all()[TopicCompactionThresholds.name_of(topic.partition(1))] == 100
    store.remove(topic)
    assert store.get(topic) is None and store.all() == {str(other): 0}


def test_the_backlog_estimate_is_pulsars(harnesses):
    h = harnesses()
    topic = h.topic()
    positions = h.publish_all([single(f"k{i}", b"x" * 100, sequence_id=i) for i in range(10)])
    ml = topic.ml
    assert backlog_estimate(ml, None, []) == ml.size_bytes()  # no durable subscription: everything
    topic.create_subscription("slow", positions[4])
    topic.create_subscription("fast", positions[8])
    durable = [sub.cursor for sub in topic.subscriptions.values()]
    assert backlog_estimate(ml, None, durable) == ml.size_after(positions[3])  # the slowest one's
    compactor = ml.open_cursor(COMPACTION_SUBSCRIPTION, "earliest")
    compactor.mark_delete(positions[6])
    assert backlog_estimate(ml, compactor, durable) == ml.size_after(positions[6])
    assert 0 < ml.size_after(positions[6]) < ml.size_after(positions[3])


def _pass(topics, threshold: int) -> None:
    for _ in housekeeping.check_compaction(topics, lambda name: threshold, None):
        pass


def test_the_check_compacts_a_topic_past_its_threshold_and_prepares_one_under_it(harnesses):
    h = harnesses()
    over, under, off = (h.topic(f"persistent://public/default/{n}") for n in ("over", "under", "off"))
    for topic in (over, under, off):
        h.publish_all([single("k", b"x" * 100, sequence_id=i) for i in range(5)], str(topic.name))

    async def scenario() -> None:
        _pass({"over": over}, 100)
        assert over.compaction.running
        _pass({"under": under}, 10_000_000)
        _pass({"off": off}, 0)
        assert not under.compaction.running and not off.compaction.running
        await eventually_async(lambda: over.compaction.status is CompactionStatus.SUCCESS)
        await eventually_async(lambda: under.compaction.cursor is not None, what="the __compaction cursor")
        assert off.compaction.cursor is None
        _pass({"over": over}, 100)  # nothing new since: the cursor's backlog is 0
        assert not over.compaction.running

    h.run(scenario())
    assert over.compaction.record.succeed_count == 1
    assert under.compaction.cursor.mark_delete_position < under.ml.first_position()  # at the earliest


def test_the_record_counts_runs_and_works_out_throughput():
    record = CompactionRecord(now=0.0)
    assert not record.ran and record.to_json() == {
        "lastCompactionRemovedEventCount": 0,
        "lastCompactionSucceedTimestamp": 0,
        "lastCompactionFailedTimestamp": 0,
        "lastCompactionDurationTimeInMills": 0,
    }
    record.started()
    record.bytes_read += 4000
    record.bytes_written += 1000
    record.succeeded(removed=95)
    record.started()
    record.failed()
    assert record.ran and record.succeed_count == 1 and record.failed_count == 1
    section = record.to_json()
    assert section["lastCompactionRemovedEventCount"] == 95
    assert section["lastCompactionSucceedTimestamp"] > 0 and section["lastCompactionFailedTimestamp"] > 0
    assert record.removed_event_count == 95
    record.update_rates(2.0)
    assert (record.read_throughput, record.write_throughput) == (2000.0, 500.0)
    record.update_rates(4.0)
    assert (record.read_throughput, record.write_throughput) == (0.0, 0.0)


def test_checkpoints_stop_a_run_and_release_one_held_at_its_step():
    free = CompactionCheckpoints("t")
    free.check()
    free.check("phase_two")
    held = CompactionCheckpoints("t", pause_at="phase_two")
    held.check("phase_one")  # not its step
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            held.check("phase_two")
        except CompactionStopped as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    held.stop()
    thread.join(10)
    assert not thread.is_alive() and len(outcome) == 1
    with pytest.raises(CompactionStopped):
        held.check()

    async def on_loop() -> None:
        paused = CompactionCheckpoints("t", pause_at="after_switch")
        await paused.check_on_loop("before_delete")  # not its step
        waiting = asyncio.ensure_future(paused.check_on_loop("after_switch"))
        await asyncio.sleep(0)
        assert not waiting.done()
        paused.stop()
        with pytest.raises(CompactionStopped):
            await waiting

    asyncio.run(on_loop())


def test_a_compaction_stopped_leaves_the_previous_view_and_no_file(harnesses):
    h = harnesses()
    topic = h.topic()
    h.publish_all([single("a", b"1", sequence_id=0)])

    async def compacted() -> None:
        task = topic.compaction.start(None)
        assert task is not None
        await task

    h.run(compacted())
    view = topic.compaction.view
    h.publish_all([single("a", b"2", sequence_id=1)])
    topic.compaction.stop()
    h.run(compacted())
    assert topic.compaction.status is CompactionStatus.ERROR
    assert "stopping" in topic.compaction.last_error
    assert topic.compaction.view is view
    assert topic.compaction.record.failed_count == 1 and topic.compaction.record.succeed_count == 1
    stem = f"{view.ledger.ledger_id:020d}"
    assert sorted(p.name for p in compacted_directory(topic.ml.directory).iterdir()) == [
        f"{stem}.idx",
        f"{stem}.log",
    ]


def _id(position: Position) -> wire.MessageIdData:
    return wire.MessageIdData(ledger_id=position.ledger_id, entry_id=position.entry_id)


def test_a_seek_on_a_compacted_read_lands_in_the_view_up_to_its_horizon(harnesses):
    h = harnesses()
    topic = h.topic()
    positions = h.publish_all([single(f"k{i % 2}", b"v", sequence_id=i) for i in range(6)])
    compaction = topic.compaction
    assert compaction.seek_position(_id(positions[2])) == (positions[2], False)  # no view: the topic's

    async def compacted() -> None:
        task = compaction.start(None)
        assert task is not None
        await task

    h.run(compacted())
    after = h.publish_all([single("k0", b"after", sequence_id=6)])[0]
    earliest = wire.MessageIdData(ledger_id=2**64 - 1, entry_id=2**64 - 1)
    assert compaction.seek_position(earliest) == (positions[0], False)  # nothing trimmed: the topic's first
    assert compaction.seek_position(_id(positions[4])) == (positions[4], True)
    assert compaction.seek_position(_id(after)) == (after, False)
    assert compaction.time_position(0) == (positions[0], False)  # the topic has an earlier message
    assert compaction.time_position(2**62) == (topic.ml.next_position(after), False)
