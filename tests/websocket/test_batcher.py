"""A WebSocket producer's batches without a broker (websocket/batcher.py, local_producer.batch_entry):
when an entry goes (full by count or bytes, after the delay, before a message that must go alone),
and what it holds (each member's own metadata, the entry's sequence ids)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.protocol import wire
from magnetar.protocol.batch import iter_batch
from magnetar.websocket.batcher import Batcher
from magnetar.websocket.json_shapes import OutgoingMessage
from magnetar.websocket.local_producer import batch_entry, batchable


class Entries:
    """Stands where the producer is: records each entry the batcher hands it, answers none."""

    def __init__(self) -> None:
        self.entries: list[list[bytes]] = []
        self.sent = asyncio.Event()

    def send(self, message: OutgoingMessage) -> asyncio.Future[wire.MessageIdData]:
        self.entries.append([message.payload])
        return asyncio.get_running_loop().create_future()

    def send_batch(self, messages, futures) -> None:
        assert len(messages) == len(futures)
        self.entries.append([m.payload for m in messages])
        self.sent.set()


def run(coroutine):
    return asyncio.run(coroutine)


def test_an_entry_goes_when_full_by_count_or_by_bytes():
    async def scenario() -> list[list[bytes]]:
        entries = Entries()
        batcher = Batcher(entries, max_messages=3, max_delay_s=60, max_bytes=10)  # type: ignore[arg-type]
        for payload in (b"a", b"b", b"c", b"d", b"1234567890", b"e"):
            batcher.send(OutgoingMessage(payload))
        batcher.flush()
        return entries.entries

    # 3 by count; d and 10 bytes would pass 10: d goes, and the 10 bytes fill an entry alone.
    assert run(scenario()) == [[b"a", b"b", b"c"], [b"d"], [b"1234567890"], [b"e"]]


def test_an_entry_goes_after_the_delay_and_a_delayed_message_goes_alone():
    async def scenario() -> list[list[bytes]]:
        entries = Entries()
        batcher = Batcher(entries, max_messages=100, max_delay_s=0.01)  # type: ignore[arg-type]
        batcher.send(OutgoingMessage(b"x"))
        batcher.send(OutgoingMessage(b"y"))
        assert entries.entries == []  # not full: it waits for the delay
        await asyncio.wait_for(entries.sent.wait(), 5)
        batcher.send(OutgoingMessage(b"z"))
        batcher.send(OutgoingMessage(b"later", deliver_after_ms=5))
        return entries.entries

    assert run(scenario()) == [[b"x", b"y"], [b"z"], [b"later"]]


@pytest.mark.parametrize(
    "message",
    [
        OutgoingMessage(b"", deliver_at=1),
        OutgoingMessage(b"", deliver_after_ms=1),
        OutgoingMessage(b"", disable_replication=True),
        OutgoingMessage(b"", replication_clusters=["east"]),
    ],
)
def test_delayed_or_replication_routed_messages_go_alone(message):
    assert not batchable(message)
    assert batchable(OutgoingMessage(b"", key="k", properties={"a": "b"}, event_time=5, sequence_id=9))


def test_a_batch_entry_keeps_each_members_metadata():
    messages = [
        OutgoingMessage(b"one", {"a": "1"}, "k1", 11),
        OutgoingMessage(b"two", key="a2V5", key_b64=True),
    ]
    metadata, payload = batch_entry(messages, [7, 8], "ws-producer", b"\x00" * 7 + b"\x01")
    assert (metadata.sequence_id, metadata.highest_sequence_id) == (7, 8)
    assert (metadata.num_messages_in_batch, metadata.producer_name) == (2, "ws-producer")
    assert metadata.schema_version == b"\x00" * 7 + b"\x01"
    members = [(single, bytes(data)) for single, data in iter_batch(payload, 2)]
    first, second = members
    assert first[1] == b"one" and second[1] == b"two"
    assert (first[0].sequence_id, first[0].partition_key, first[0].event_time) == (7, "k1", 11)
    assert {kv.key: kv.value for kv in first[0].properties} == {"a": "1"}
    assert second[0].sequence_id == 8 and second[0].partition_key_b64_encoded
