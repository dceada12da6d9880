"""Chunked messages through a real broker: big ones, interleaved producers, dying consumers, restarts."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from magnetar.client import ChunkMessageId, ConsumerType, InitialPosition, MessageId, aio
from magnetar.client.handler import State
from magnetar.protocol import wire
from tests.interop.support import RawConnection, admin_call, chunk_frame, stored_chunks
from tests.waiting import eventually, eventually_async

from .proxy import ShrinkingProxy

pytestmark = pytest.mark.slow  # slow: restarts mid-send, megabytes of chunks, ack timeouts

SMALL = 64 * 1024  # a small broker limit makes many chunks out of a few MB


def test_20mb_message(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(topic, chunking_enabled=True)
    data = os.urandom(20 * 1024 * 1024)
    msg_id = producer.send(data, properties={"big": "yes"})
    assert isinstance(msg_id, ChunkMessageId) and len(msg_id.chunk_message_ids()) == 5
    msg = consumer.receive(20_000)
    assert msg.data() == data and msg.properties() == {"big": "yes"}
    assert msg.message_id() == msg_id
    assert msg.message_id().first_chunk_message_id() == msg_id.first_chunk_message_id()
    consumer.acknowledge(msg)
    consumer.close()
    again = magnetar_client.subscribe(topic, "sub")
    with pytest.raises(Exception, match="within"):
        again.receive(300)


def test_100mb_message(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(topic, chunking_enabled=True, send_timeout_millis=60_000)
    data = os.urandom(100 * 1024 * 1024)
    producer.send(data)
    msg = consumer.receive(60_000)
    assert len(msg.data()) == len(data) and msg.data() == data
    consumer.acknowledge(msg)


def test_small_messages_are_not_chunked(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(topic, chunking_enabled=True)
    msg_id = producer.send(b"small")
    assert not isinstance(msg_id, ChunkMessageId)
    assert consumer.receive(3000).data() == b"small"


def test_too_big_without_chunking_is_refused(magnetar_client, topic):
    producer = magnetar_client.create_producer(topic)
    with pytest.raises(Exception, match="chunking"):
        producer.send(bytes(6 * 1024 * 1024))


def test_interleaved_chunks_of_three_producers(broker_factory, topic):
    broker = broker_factory({"max_message_size": SMALL})

    async def main():
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            consumer = await client.subscribe(topic, "sub")
            producers = [await client.create_producer(topic, chunking_enabled=True) for _ in range(3)]
            payloads = [os.urandom(1024 * 1024 + 1000 * k) for k in range(3)]
            # Send all three at once: each writes a chunk, waits for the socket, and so on.
            futures = await asyncio.gather(
                *(p.send_async(d) for p, d in zip(producers, payloads, strict=True))
            )
            ids = await asyncio.gather(*futures)
            spans = [(i.first_chunk_message_id().entry_id(), i.entry_id()) for i in ids]
            assert spans[0][1] > spans[1][0] and spans[1][1] > spans[2][0], f"not interleaved: {spans}"
            received = {}
            for _ in range(3):
                msg = await consumer.receive(10_000)
                await consumer.acknowledge(msg)
                received[msg.producer_name()] = msg.data()
            assert received == {p.producer_name(): d for p, d in zip(producers, payloads, strict=True)}
            assert consumer.pending_chunked_messages == 0

    asyncio.run(main())


def test_consumer_dying_mid_message_then_a_new_one_gets_it_whole(broker_factory, topic):
    broker = broker_factory({"max_message_size": SMALL})

    async def main():
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            doomed = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Failover)
            chunks_seen = 0
            original = doomed.on_message

            def die_after_three(cnx, command, payload):  # every MESSAGE here is a chunk
                nonlocal chunks_seen
                chunks_seen += 1
                if chunks_seen == 3:
                    doomed.state = State.CLOSED  # no reconnect: it is dead
                    doomed.cnx._writer.transport.abort()
                    return
                original(cnx, command, payload)

            doomed.on_message = die_after_three
            producer = await client.create_producer(topic, chunking_enabled=True)
            data = os.urandom(600 * 1024)
            await producer.send(data)
            await eventually_async(lambda: chunks_seen >= 3, what="three chunks reaching the doomed consumer")
            async with aio.Client(broker.service_url, operation_timeout_seconds=10) as other:
                survivor = await other.subscribe(topic, "sub", consumer_type=ConsumerType.Failover)
                msg = await survivor.receive(10_000)
                assert msg.data() == data
                await survivor.acknowledge(msg)

    asyncio.run(main())


def test_broker_restart_in_the_middle_of_a_chunked_send(broker_factory, magnetar_factory, topic):
    broker = broker_factory({"max_message_size": SMALL})
    client = magnetar_factory(broker.service_url, max_backoff_seconds=0.5)
    consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(topic, chunking_enabled=True, send_timeout_millis=60_000)
    data = os.urandom(32 * 1024 * 1024)  # over 500 chunks
    results = []
    producer.send_async(data, lambda res, msg_id: results.append((res, msg_id)))
    inner = producer._inner

    # The chunks go out one after another from the client's loop: find the message's chunk
    # group, wait until a few chunks are stored, then kill the broker with the rest to come.
    def five_chunks_stored():
        group = next((op.chunk for op in list(inner._pending) if op.chunk is not None), None)
        return group if group is not None and len(group.ids) >= 5 else None

    group = eventually(five_chunks_stored, interval=0.001, what="five chunks of the message stored")
    assert len(group.ids) < group.num_chunks and not results, "the send finished before the restart"
    broker.stop(signal.SIGKILL)
    broker.restart()
    eventually(lambda: results, timeout=30, what="the send's result")
    assert results[0][0] == 0, results
    msg = consumer.receive(30_000)
    assert msg.data() == data
    consumer.acknowledge(msg)


@pytest.mark.parametrize("give_back", ["nack", "ack-timeout"])
def test_a_chunked_message_given_back_on_shared_comes_back_whole(magnetar_client, topic, give_back):
    options = (
        {"negative_ack_redelivery_delay_ms": 100}
        if give_back == "nack"
        else {"unacked_messages_timeout_ms": 1000}
    )
    consumer = magnetar_client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared, **options)
    producer = magnetar_client.create_producer(topic, chunking_enabled=True)
    data = os.urandom(11 * 1024 * 1024)
    producer.send(data)
    msg = consumer.receive(10_000)
    assert msg.data() == data
    if give_back == "nack":
        consumer.negative_acknowledge(msg)
    again = consumer.receive(10_000)
    assert again.data() == data and again.redelivery_count() >= 1
    consumer.acknowledge(again)


def test_seek_to_a_chunked_message(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    producer = magnetar_client.create_producer(topic, chunking_enabled=True)
    first = os.urandom(6 * 1024 * 1024)
    chunked_id = producer.send(first)
    producer.send(b"after")
    assert consumer.receive(10_000).data() == first
    assert consumer.receive(10_000).data() == b"after"
    consumer.seek(chunked_id)  # exclusive of the message itself, as Pulsar's clients
    assert consumer.receive(10_000).data() == b"after"
    reader = magnetar_client.create_reader(topic, chunked_id, start_message_id_inclusive=True)
    assert reader.read_next(10_000).data() == first


def test_discarded_chunks_give_their_permits_back(broker, topic):
    """Orphan, out-of-range and gapped chunks never leave the consumer short of permits."""
    from magnetar.client.connection import Connection
    from magnetar.protocol import commands
    from magnetar.protocol import pulsar_wire_pb2 as wire
    from magnetar.protocol.headers import encode_headers_and_payload

    async def main():
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            consumer = await client.subscribe(topic, "sub", receiver_queue_size=4)
            cnx = await Connection.open("127.0.0.1", broker.port)
            await cnx.request(
                wire.CommandProducer(topic=topic, producer_id=1, request_id=0, producer_name="raw")
            )
            seq = 0

            def send(payload: bytes, **chunk) -> None:
                nonlocal seq
                meta = wire.MessageMetadata(
                    producer_name="raw", sequence_id=seq, publish_time=int(time.time() * 1000)
                )
                for key, value in chunk.items():
                    setattr(meta, key, value)
                body = wire.CommandSend(producer_id=1, sequence_id=seq, is_chunk=bool(chunk))
                cnx.send_command(commands.wrap(body), encode_headers_and_payload(meta, payload))
                seq += 1

            garbage = [
                dict(uuid="ghost", chunk_id=1, num_chunks_from_msg=3, total_chunk_msg_size=6),  # unknown uuid
                dict(uuid="ghost", chunk_id=2, num_chunks_from_msg=3, total_chunk_msg_size=6),
                dict(uuid="bad", chunk_id=5, num_chunks_from_msg=3, total_chunk_msg_size=6),  # id >= num
                dict(uuid="gap", chunk_id=0, num_chunks_from_msg=3, total_chunk_msg_size=6),
                dict(uuid="gap", chunk_id=2, num_chunks_from_msg=3, total_chunk_msg_size=6),  # gap
            ]
            for _ in range(3):  # 15 discarded chunks through a queue of 4 permits
                for chunk in garbage:
                    send(b"xx", **chunk)
            send(b"whole", uuid="ok", chunk_id=0, num_chunks_from_msg=2, total_chunk_msg_size=10)
            send(b"thing", uuid="ok", chunk_id=1, num_chunks_from_msg=2, total_chunk_msg_size=10)
            send(b"plain")
            first = await consumer.receive(5000)
            second = await consumer.receive(5000)
            assert [first.data(), second.data()] == [b"wholething", b"plain"]
            await cnx.close()

    asyncio.run(main())


def test_a_readers_chunk_progress(broker, topic):
    """``chunk_progress()``, what the Spark range reads stop on: the newest chunk taken in (a
    discarded one too), the first chunk of each chunked message not handed out, the queue."""
    from magnetar.client.connection import Connection
    from magnetar.protocol import commands
    from magnetar.protocol.headers import encode_headers_and_payload

    async def main():
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            cnx = await Connection.open("127.0.0.1", broker.port)
            await cnx.request(
                wire.CommandProducer(topic=topic, producer_id=1, request_id=0, producer_name="raw")
            )
            whole, partial = [b"whole", b"thing"], [b"open", b"ended"]
            for seq, (uuid, chunk_id, parts) in enumerate(
                [("w", 0, whole), ("w", 1, whole), ("o", 0, partial), ("ghost", 1, partial)]
            ):
                meta = wire.MessageMetadata(
                    producer_name="raw",
                    sequence_id=seq,
                    publish_time=int(time.time() * 1000),
                    uuid=uuid,
                    chunk_id=chunk_id,
                    num_chunks_from_msg=len(parts),
                    total_chunk_msg_size=sum(map(len, parts)),
                )
                body = wire.CommandSend(producer_id=1, sequence_id=seq, is_chunk=True)
                cnx.send_command(commands.wrap(body), encode_headers_and_payload(meta, parts[chunk_id]))
            reader = await client.create_reader(topic, MessageId.earliest)
            last = await eventually_async(
                lambda: _last_entry_at_least(reader, 3), what="the four chunks stored"
            )
            ledger, ghost = last.ledger_id(), last.entry_id()
            key = lambda msg_id: (msg_id.ledger_id(), msg_id.entry_id())  # noqa: E731

            def seen_all():
                newest = reader.chunk_progress().newest_chunk
                return newest is not None and key(newest) == (ledger, ghost)

            await eventually_async(seen_all, what="the orphan chunk taken in")
            progress = reader.chunk_progress()
            assert [key(i) for i in progress.unfinished_first_chunks] == [
                (ledger, ghost - 1),  # "o", being assembled
                (ledger, ghost - 3),  # "w", complete and queued
            ]
            assert not progress.queue_empty
            assert (await reader.read_next(5000)).data() == b"wholething"
            progress = reader.chunk_progress()
            assert [key(i) for i in progress.unfinished_first_chunks] == [(ledger, ghost - 1)]
            assert progress.queue_empty and key(progress.newest_chunk) == (ledger, ghost)
            await cnx.close()

    asyncio.run(main())


async def _last_entry_at_least(reader, entry: int):
    last = await reader.get_last_message_id()
    return last if last.entry_id() >= entry else None


def test_chunks_sent_again_over_a_new_connection_are_stored_once(broker_factory, magnetar_factory, topic):
    """Our producer sends again every chunk it has no receipt for; the broker answers those it
    stored with their positions, so the message id names the chunks stored."""
    broker = broker_factory({"max_message_size": SMALL})
    with ShrinkingProxy(broker.port, shrink_by=0) as proxy:
        client = magnetar_factory(proxy.service_url, max_backoff_seconds=0.5)
        producer = client.create_producer(topic, chunking_enabled=True, send_timeout_millis=60_000)
        data = os.urandom(2 * 1024 * 1024)
        results = []
        proxy.drop_receipts = True
        producer.send_async(data, lambda res, msg_id: results.append((res, msg_id)))
        eventually(lambda: len(stored_chunks(broker, topic)) >= 10, timeout=30, what="ten chunks stored")
        proxy.drop_receipts = False
        proxy.cut()
        producer.flush()
        assert [res for res, _ in results] == [0]
    chunks = stored_chunks(broker, topic)
    assert len(chunks) == len(set(chunks)) == len(results[0][1].chunk_message_ids())
    consumer = magnetar_factory(broker.service_url).subscribe(
        topic, "sub", initial_position=InitialPosition.Earliest
    )
    msg = consumer.receive(10_000)
    assert msg.data() == data and msg.message_id() == results[0][1]


def test_copies_of_chunks_stored_twice_are_skipped_and_acknowledged(broker, magnetar_factory, topic):
    """A broker that stores resent chunks again (Pulsar's does) leaves chunk ids 0..3, 2..5 on
    the topic; our consumer assembles the message once and acknowledges the copies."""
    raw = RawConnection(broker.port)
    raw.handshake()
    name = raw.create_producer(topic)
    parts = [os.urandom(1000) for _ in range(6)]
    consumer = magnetar_factory(broker.service_url).subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
    for chunk_id in [0, 1, 2, 3, 2, 3, 4, 5, 5]:
        # A copy with its own publish time: this broker takes it for another message and stores it.
        raw.send(chunk_frame(name, 0, f"{name}-0", chunk_id, parts))
        raw.expect(wire.BaseCommand.SEND_RECEIPT)
        time.sleep(0.002)  # not a wait for an event: the copy needs a later publish time (ms)
    raw.close()
    msg = consumer.receive(10_000)
    assert msg.data() == b"".join(parts)
    consumer.acknowledge(msg)
    eventually(lambda: subscription_backlog(broker, topic, "sub") == 0, what="every entry acknowledged")
    # The consumer has been through every entry (it acknowledged the copies): had it assembled
    # the message twice, the second would be waiting for it now.
    with pytest.raises(Exception, match="within"):
        consumer.receive(100)


def subscription_backlog(broker, topic: str, sub: str) -> int:
    status, stats = admin_call(
        broker, "GET", topic.replace("persistent://", "/admin/v2/persistent/") + "/stats"
    )
    assert status == 200
    return stats["subscriptions"][sub]["msgBacklog"]


def test_a_large_message_queued_while_the_broker_is_down_is_split_by_its_limit(
    broker_factory, magnetar_factory, topic
):
    """Split by the limit the broker announced last, not the 5 MiB default: sent whole, it would
    be refused and close every new connection."""
    broker = broker_factory({"max_message_size": SMALL})
    client = magnetar_factory(broker.service_url, max_backoff_seconds=0.5)
    producer = client.create_producer(topic, chunking_enabled=True, send_timeout_millis=30_000)
    producer.send(b"before")
    broker.stop()
    data = os.urandom(5 * SMALL)
    results = []
    producer.send_async(data, lambda res, msg_id: results.append((res, msg_id)))
    broker.restart()
    producer.flush()
    assert results and results[0][0] == 0 and isinstance(results[0][1], ChunkMessageId)
    # Subscribed after the restart: a consumer across it would get "before" again, unacknowledged.
    consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    assert [consumer.receive(10_000).data() for _ in range(2)] == [b"before", data]


def test_a_message_over_a_lowered_limit_fails_instead_of_closing_every_connection(
    broker_factory, magnetar_factory, topic
):
    broker = broker_factory({"max_message_size": 4 * SMALL})
    client = magnetar_factory(broker.service_url, max_backoff_seconds=0.5)
    producer = client.create_producer(topic, send_timeout_millis=30_000)
    producer.send(b"before")
    broker.stop()
    results = []
    producer.send_async(os.urandom(2 * SMALL), lambda res, msg_id: results.append(res))
    broker.config = {"max_message_size": SMALL}  # restarted with a lower limit
    broker.restart()
    producer.send(b"after")
    assert len(results) == 1 and results[0] != 0
    consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    assert [consumer.receive(10_000).data() for _ in range(2)] == [b"before", b"after"]
