"""Acknowledgement bookkeeping: batch ack state, grouping into ACK commands, redelivery timers."""

from __future__ import annotations

from magnetar.client.acks import AckGrouper, BatchAcks, RedeliveryTimer
from magnetar.client.message import MessageId
from magnetar.protocol import pulsar_wire_pb2 as wire


def batch_id(entry: int, index: int, size: int = 3) -> MessageId:
    return MessageId(-1, 1, entry, index, size)


def test_batch_entry_is_acked_once_every_member_is():
    acks = BatchAcks()
    acks.delivered(batch_id(5, 0), 3)
    assert not acks.ack(batch_id(5, 0))
    assert not acks.ack(batch_id(5, 2))
    assert acks.remaining(batch_id(5, 0)) == ({1}, 3)
    assert acks.ack(batch_id(5, 1))
    assert acks.remaining(batch_id(5, 0)) is None


def test_batch_delivered_with_an_ack_set_only_waits_for_the_rest():
    acks = BatchAcks()
    acks.delivered(batch_id(5, 1), 3, unacked={1})
    assert acks.ack(batch_id(5, 1))


def test_batch_unknown_here_uses_the_ids_batch_size():
    acks = BatchAcks()
    assert not acks.ack(batch_id(9, 0, size=2))
    assert acks.ack(batch_id(9, 1, size=2))


def test_cumulative_ack_forgets_earlier_batches():
    acks = BatchAcks()
    for entry in (1, 2, 3):
        acks.delivered(batch_id(entry, 0), 3)
    acks.forget_up_to(MessageId(-1, 1, 2))
    assert acks.remaining(batch_id(1, 0)) is None and acks.remaining(batch_id(3, 0)) is not None
    assert acks.is_last_unacked_up_to(batch_id(3, 2)) and not acks.is_last_unacked_up_to(batch_id(3, 1))


def test_grouper_builds_one_command_per_kind():
    grouper = AckGrouper()
    grouper.add_individual(MessageId(-1, 1, 1))
    grouper.add_individual(MessageId(-1, 1, 2))
    grouper.add_individual(MessageId(-1, 1, 2))
    grouper.add_cumulative(MessageId(-1, 1, 0))
    grouper.add_cumulative(MessageId(-1, 0, 9))  # older: ignored
    commands = grouper.take(consumer_id=7)
    assert [c.ack_type for c in commands] == [wire.CommandAck.Cumulative, wire.CommandAck.Individual]
    assert [(m.ledger_id, m.entry_id) for m in commands[0].message_id] == [(1, 0)]
    assert sorted((m.ledger_id, m.entry_id) for m in commands[1].message_id) == [(1, 1), (1, 2)]
    assert all(c.consumer_id == 7 for c in commands)
    assert not grouper and grouper.take(7) == []


def test_grouper_reports_full_and_duplicates():
    grouper = AckGrouper(max_individual=2)
    assert not grouper.add_individual(MessageId(-1, 1, 1))
    assert grouper.add_individual(MessageId(-1, 1, 2))
    assert grouper.is_duplicate(MessageId(-1, 1, 1)) and grouper.is_duplicate(batch_id(2, 1))
    assert not grouper.is_duplicate(MessageId(-1, 1, 3))
    grouper.add_cumulative(MessageId(-1, 1, 10))
    assert grouper.is_duplicate(MessageId(-1, 1, 7))


def test_grouper_batch_index_ack_carries_the_ack_set():
    grouper = AckGrouper()
    grouper.add_individual(batch_id(4, 0), ack_set=[0b110])
    (command,) = grouper.take(1)
    (msg_id,) = command.message_id
    assert list(msg_id.ack_set) == [0b110] and not msg_id.HasField("batch_index")
    assert not grouper.is_duplicate(batch_id(4, 1))


def test_redelivery_timer_hands_out_due_entries_once():
    timer = RedeliveryTimer()
    timer.add(batch_id(1, 0), 10.0)
    timer.add(batch_id(1, 2), 5.0)  # same entry: the earlier time wins
    timer.add(MessageId(-1, 1, 2), 20.0)
    assert timer.take_due(4.0) == []
    assert timer.take_due(6.0) == [MessageId(-1, 1, 1)]
    assert timer.take_due(6.0) == []
    timer.add(MessageId(-1, 1, 3), 1.0)
    timer.remove_up_to(MessageId(-1, 1, 2))
    assert timer.take_due(100.0) == [MessageId(-1, 1, 3)]
    assert len(timer) == 0
