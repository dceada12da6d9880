"""``Producer.send_stored`` (what a geo-replicator sends) against a real Magnetar broker: the
metadata and payload arrive as given, the SEND's sequence ids drive deduplication for a
replicator-named producer, and ``fail_refused_sends`` fails a refused message alone."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client import InitialPosition, MessageTooBig, aio
from magnetar.protocol import wire
from magnetar.protocol.batch import encode_batch
from tests.stored_metadata import stored_metadata

REPLICATOR = "magnetar.repl.x-->y"


async def sent(producer, metadata: wire.MessageMetadata, payload: bytes, sequence_id: int, **send):
    return await (await producer.send_stored(metadata, payload, sequence_id=sequence_id, **send))


def test_metadata_and_payload_arrive_as_given(broker, topic):
    async def main():
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic, producer_name=REPLICATOR)
            meta = stored_metadata(
                41,
                partition_key="k1",
                ordering_key=b"ord",
                event_time=1234,
                properties=[wire.KeyValue(key="city", value="lyon")],
                replicated_from="x",
            )
            await sent(producer, meta, b"reading-1", sequence_id=100)
            singles = [wire.SingleMessageMetadata(partition_key=f"b{i}") for i in range(3)]
            batch = encode_batch([(s, f"part-{i}".encode()) for i, s in enumerate(singles)])
            await sent(
                producer,
                stored_metadata(42, num_messages_in_batch=3, replicated_from="x"),
                batch,
                sequence_id=101,
                highest_sequence_id=103,
                num_messages=3,
            )
            msg = await consumer.receive(10_000)
            assert msg.data() == b"reading-1"
            assert msg.producer_name() == "sensor-7", "the stored producer name, not the replicator's"
            assert (msg.partition_key(), msg.event_timestamp()) == ("k1", 1234)
            assert msg.publish_timestamp() == 1_700_000_000_000
            assert msg.properties() == {"city": "lyon"}
            assert msg.replicated_from() == "x"
            parts = [await consumer.receive(10_000) for _ in range(3)]
            assert [m.data() for m in parts] == [b"part-0", b"part-1", b"part-2"]
            assert [m.partition_key() for m in parts] == ["b0", "b1", "b2"]
            assert {m.producer_name() for m in parts} == {"sensor-7"}
            assert producer.last_sequence_id() == 103

    asyncio.run(main())


def test_a_replicator_resend_is_dropped_though_deduplication_is_off(broker, topic):
    async def main():
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            consumer = await client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
            plain = await client.create_producer(topic, producer_name="plain")
            first = await sent(plain, stored_metadata(1), b"plain", sequence_id=5)
            again = await sent(plain, stored_metadata(1), b"plain", sequence_id=5)
            assert again.entry_id() > first.entry_id() >= 0, "the namespace does not deduplicate"

            replicator = await client.create_producer(topic, producer_name=REPLICATOR)
            stored = await sent(replicator, stored_metadata(1), b"copy", sequence_id=7)
            dropped = await sent(replicator, stored_metadata(1), b"copy", sequence_id=7)
            assert stored.ledger_id() >= 0
            assert (dropped.ledger_id(), dropped.entry_id()) == (-1, -1)
            await replicator.close()

            # After a reconnect under the same name too (the replicator's restart).
            replicator = await client.create_producer(topic, producer_name=REPLICATOR)
            assert replicator.last_sequence_id() == 7
            dropped = await sent(replicator, stored_metadata(1), b"copy", sequence_id=6)
            assert (dropped.ledger_id(), dropped.entry_id()) == (-1, -1)
            await sent(replicator, stored_metadata(2), b"after", sequence_id=8)

            received = [(await consumer.receive(10_000)).data() for _ in range(4)]
            assert received == [b"plain", b"plain", b"copy", b"after"]

    asyncio.run(main())


def test_too_big_fails_before_sending(broker_factory, topic):
    broker = broker_factory({"max_message_size": 64 * 1024})

    async def main():
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic, producer_name=REPLICATOR)
            with pytest.raises(MessageTooBig):
                await producer.send_stored(stored_metadata(1), bytes(64 * 1024), sequence_id=1)
            await sent(producer, stored_metadata(2), b"fits", sequence_id=2)
            msg = await consumer.receive(10_000)
            assert msg.data() == b"fits"
            assert producer.last_sequence_id() == 2

    asyncio.run(main())


def test_fail_refused_sends_fails_the_refused_message_only(broker, topic):
    """A batch whose payload does not add up is refused per message (NotAllowedError): with
    ``fail_refused_sends`` that send fails, the connection stays and later sends succeed."""

    async def main():
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic, producer_name=REPLICATOR, fail_refused_sends=True)
            good = await producer.send_stored(stored_metadata(1), b"one", sequence_id=1)
            bad = await producer.send_stored(
                stored_metadata(2, num_messages_in_batch=2), b"not a batch", sequence_id=2, num_messages=2
            )
            later = await producer.send_stored(stored_metadata(4), b"four", sequence_id=4)
            assert (await good).ledger_id() >= 0
            with pytest.raises(Exception, match=r"(?i)batch|invalid"):
                await bad
            assert (await later).ledger_id() >= 0
            assert [(await consumer.receive(10_000)).data() for _ in range(2)] == [b"one", b"four"]

    asyncio.run(main())


def test_a_copy_is_still_known_after_the_remote_is_killed(broker, topic):
    """A copied message is deduplicated by its source cluster, original producer and metadata
    sequence ids, which recovery reads back from the stored entries: after a kill -9 (no state
    snapshot written since), sending the same copies again stores nothing new."""

    def copies(first: int, count: int):
        return [
            (stored_metadata(i, replicated_from="edge", highest_sequence_id=i), f"r{i}".encode())
            for i in range(first, first + count)
        ]

    async def send_all(batch) -> list:
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            producer = await client.create_producer(topic, producer_name=REPLICATOR)
            return [await sent(producer, meta, data, sequence_id=meta.sequence_id) for meta, data in batch]

    async def stored() -> list[bytes]:
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            reader = await client.create_reader(topic, aio.MessageId.earliest)
            out = []
            while await reader.has_message_available():
                out.append((await reader.read_next(5_000)).data())
            return out

    first = asyncio.run(send_all(copies(0, 20)))
    assert all(msg_id.ledger_id() >= 0 for msg_id in first)
    broker.kill()
    broker.restart()
    again = asyncio.run(send_all(copies(10, 20)))  # 10..19 sent before, 20..29 new
    assert [msg_id.ledger_id() for msg_id in again[:10]] == [-1] * 10
    assert all(msg_id.ledger_id() >= 0 for msg_id in again[10:])
    assert asyncio.run(stored()) == [f"r{i}".encode() for i in range(30)]
