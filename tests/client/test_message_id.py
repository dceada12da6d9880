"""MessageId: serialization (the official client's bytes), ordering, chunked ids."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.client.message import ChunkMessageId, MessageId
from magnetar.protocol import pulsar_wire_pb2 as wire


def test_round_trip_keeps_every_field():
    msg_id = MessageId(partition=3, ledger_id=12, entry_id=34, batch_index=5, batch_size=10)
    back = MessageId.deserialize(msg_id.serialize())
    assert back == msg_id
    assert (back.partition(), back.ledger_id(), back.entry_id(), back.batch_index(), back.batch_size()) == (
        3,
        12,
        34,
        5,
        10,
    )


def test_earliest_and_latest_match_the_official_client_bytes():
    assert MessageId.earliest.serialize() == pulsar.MessageId.earliest.serialize()
    assert MessageId.latest.serialize() == pulsar.MessageId.latest.serialize()
    assert MessageId.deserialize(pulsar.MessageId.earliest.serialize()) == MessageId.earliest
    assert MessageId.deserialize(pulsar.MessageId.latest.serialize()) == MessageId.latest


@pytest.mark.parametrize("args", [(-1, 5, 7, -1), (2, 5, 7, -1), (-1, 5, 7, 3), (4, 0, 0, 0)])
def test_bytes_interchange_with_the_official_client(args):
    partition, ledger, entry, batch = args
    ours = MessageId(partition, ledger, entry, batch)
    theirs = pulsar.MessageId(partition, ledger, entry, batch)
    assert MessageId.deserialize(theirs.serialize()) == ours
    back = pulsar.MessageId.deserialize(ours.serialize())
    assert (back.partition(), back.ledger_id(), back.entry_id(), back.batch_index()) == args


def test_ordering_is_ledger_entry_batch_index():
    ids = [
        MessageId(-1, 2, 0),
        MessageId(-1, 1, 5, 1),
        MessageId(-1, 1, 5),
        MessageId(-1, 1, 5, 0),
        MessageId(-1, 1, 9),
    ]
    assert sorted(ids) == [ids[2], ids[3], ids[1], ids[4], ids[0]]
    assert MessageId(-1, 1, 1) < MessageId(-1, 1, 2) <= MessageId(-1, 1, 2)
    assert MessageId(-1, 3, 0) > MessageId(-1, 2, 99) >= MessageId(-1, 2, 99)
    assert MessageId.earliest < MessageId(-1, 0, 0) < MessageId.latest


def test_equality_includes_partition_but_order_does_not():
    assert MessageId(1, 5, 5) != MessageId(2, 5, 5)
    assert not MessageId(1, 5, 5) < MessageId(2, 5, 5)
    assert len({MessageId(1, 5, 5), MessageId(1, 5, 5), MessageId(2, 5, 5)}) == 2


def test_chunked_id_is_positioned_at_its_last_chunk_and_serializes_the_first():
    chunks = [MessageId(-1, 7, e) for e in (3, 5, 8)]
    msg_id = ChunkMessageId(chunks)
    assert (msg_id.ledger_id(), msg_id.entry_id()) == (7, 8)
    assert msg_id.first_chunk_message_id() == chunks[0]
    assert msg_id.chunk_message_ids() == chunks
    data = wire.MessageIdData()
    data.ParseFromString(msg_id.serialize())
    assert (data.ledger_id, data.entry_id) == (7, 8)
    assert (data.first_chunk_message_id.ledger_id, data.first_chunk_message_id.entry_id) == (7, 3)
    back = MessageId.deserialize(msg_id.serialize())
    assert isinstance(back, ChunkMessageId)
    assert back.first_chunk_message_id() == chunks[0] and back == msg_id


def test_official_chunked_id_bytes_deserialize():
    data = wire.MessageIdData(ledger_id=9, entry_id=20)
    data.first_chunk_message_id.CopyFrom(wire.MessageIdData(ledger_id=9, entry_id=17))
    msg_id = MessageId.deserialize(data.SerializeToString())
    assert isinstance(msg_id, ChunkMessageId)
    assert msg_id.first_chunk_message_id() == MessageId(-1, 9, 17)


def test_garbage_is_rejected():
    with pytest.raises(ValueError):
        MessageId.deserialize(b"\xff\xff\xff")
    with pytest.raises(ValueError):
        MessageId.deserialize(b"")
