"""Our client against our broker: round trips, batching, codecs, acks, seek, readers, reconnect."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request

import pytest

from magnetar.client import (
    CompressionType,
    ConsumerType,
    InitialPosition,
    InvalidConfiguration,
    MessageId,
    Result,
    Timeout,
    aio,
)
from tests.client.listeners import collecting_listener

CODECS = list(CompressionType)


def receive_n(consumer, n, timeout_ms=5000, ack=True):
    out = []
    for _ in range(n):
        msg = consumer.receive(timeout_ms)
        if ack:
            consumer.acknowledge(msg)
        out.append(msg)
    return out


def assert_quiet(consumer, ms=300):
    with pytest.raises(Timeout):
        msg = consumer.receive(ms)
        pytest.fail(f"unexpected {msg.data()!r}")


def test_round_trip_keeps_everything(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    with magnetar_client.create_producer(topic, producer_name="prod-a") as producer:
        ids = [
            producer.send(
                f"m{i}".encode(),
                properties={"i": str(i)},
                partition_key=f"k{i}",
                event_timestamp=1000 + i,
            )
            for i in range(5)
        ]
        assert producer.producer_name() == "prod-a"
        assert producer.last_sequence_id() == 4
    assert ids == sorted(ids) and len(set(ids)) == 5
    messages = receive_n(consumer, 5)
    assert [m.data() for m in messages] == [f"m{i}".encode() for i in range(5)]
    assert [m.message_id() for m in messages] == ids
    first = messages[0]
    assert first.properties() == {"i": "0"} and first.partition_key() == "k0" and first.key() == "k0"
    assert first.event_timestamp() == 1000 and first.publish_timestamp() > 0
    assert first.redelivery_count() == 0 and first.topic_name() == topic
    assert first.producer_name() == "prod-a"
    assert_quiet(consumer)
    consumer.close()


def test_broker_entry_metadata_gives_index_and_broker_time(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    producer.send(b"single-ish")
    for i in range(3):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    messages = receive_n(consumer, 4)
    indexes = [m.index() for m in messages]
    assert indexes[0] is not None, "the broker exposes entry metadata by default"
    assert indexes == list(range(indexes[0], indexes[0] + 4))
    assert all(m.broker_publish_time() >= m.publish_timestamp() for m in messages)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_batching_with_each_codec(magnetar_client, topic, codec):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=10,
        batching_max_publish_delay_ms=1000,
        compression_type=codec,
    )
    results = []
    done = threading.Event()

    def callback(res, msg_id):
        results.append((res, msg_id))
        if len(results) == 25:
            done.set()

    payloads = [(b"payload-%d-" % i) * (i + 1) for i in range(25)]
    for data in payloads:
        producer.send_async(data, callback)
    producer.flush()
    assert done.wait(5)
    assert all(res == Result.Ok for res, _ in results)
    ids = [msg_id for _, msg_id in results]
    assert {i.batch_size() for i in ids} == {10, 5}  # two full batches, then the flush
    messages = receive_n(consumer, 25)
    assert [m.data() for m in messages] == payloads
    assert [m.message_id() for m in messages] == ids
    assert_quiet(consumer)


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name)
def test_single_compressed_messages(magnetar_client, topic, codec):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(topic, compression_type=codec)
    payloads = [b"", b"x", b"compress me " * 5000]
    for data in payloads:
        producer.send(data)
    assert [m.data() for m in receive_n(consumer, 3)] == payloads


def test_batches_flush_on_size_and_delay(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_allowed_size_in_bytes=1000,
        batching_max_publish_delay_ms=20,
    )
    results = []
    for _ in range(4):
        producer.send_async(b"x" * 400, lambda res, msg_id: results.append(msg_id))
    msg = consumer.receive(3000)  # the delay flushes the last one without an explicit flush
    assert msg.data() == b"x" * 400
    receive_n(consumer, 3)
    assert sorted(i.batch_size() for i in results) == [2, 2, 2, 2]


def test_batching_and_chunking_together_are_refused(magnetar_client, topic):
    with pytest.raises(InvalidConfiguration, match="batching and chunking"):
        magnetar_client.create_producer(topic, batching_enabled=True, chunking_enabled=True)


def test_shared_consumers_and_negative_ack(magnetar_client, topic):
    c1 = magnetar_client.subscribe(
        topic, "shared", consumer_type=ConsumerType.Shared, negative_ack_redelivery_delay_ms=100
    )
    producer = magnetar_client.create_producer(topic)
    producer.send(b"again")
    msg = c1.receive(3000)
    c1.negative_acknowledge(msg)
    again = c1.receive(3000)
    assert again.data() == b"again" and again.redelivery_count() >= 1
    c1.acknowledge(again)
    assert_quiet(c1)


@pytest.mark.slow
def test_exclusive_negative_ack_redelivers(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "excl", negative_ack_redelivery_delay_ms=100)
    producer = magnetar_client.create_producer(topic)
    for i in range(3):
        producer.send(b"%d" % i)
    messages = receive_n(consumer, 3, ack=False)
    consumer.acknowledge(messages[0])
    consumer.negative_acknowledge(messages[1])
    consumer.acknowledge(messages[2])
    again = consumer.receive(3000)
    assert again.data() == b"1"
    consumer.acknowledge(again)
    assert_quiet(consumer)


@pytest.mark.slow
def test_unacked_messages_timeout_redelivers(magnetar_client, topic):
    consumer = magnetar_client.subscribe(
        topic, "t", consumer_type=ConsumerType.Shared, unacked_messages_timeout_ms=300
    )
    magnetar_client.create_producer(topic).send(b"forgotten")
    assert consumer.receive(3000).data() == b"forgotten"
    again = consumer.receive(3000)
    assert again.data() == b"forgotten" and again.redelivery_count() >= 1


@pytest.mark.slow
@pytest.mark.parametrize("batch_index_ack", [False, True])
def test_acks_survive_a_new_consumer(magnetar_client, topic, batch_index_ack):
    consumer = magnetar_client.subscribe(
        topic, "sub", initial_position=InitialPosition.Earliest, batch_index_ack_enabled=batch_index_ack
    )
    producer = magnetar_client.create_producer(topic, batching_enabled=True, batching_max_messages=4)
    for i in range(8):
        producer.send_async(b"%d" % i, None)
    producer.flush()
    messages = receive_n(consumer, 8, ack=False)
    for msg in messages[:6]:
        consumer.acknowledge(msg)
    consumer.close()
    consumer = magnetar_client.subscribe(topic, "sub")
    # Without batch-index acks a half-acknowledged batch comes again whole.
    expected = [b"6", b"7"] if batch_index_ack else [b"4", b"5", b"6", b"7"]
    assert [m.data() for m in receive_n(consumer, len(expected))] == expected
    assert_quiet(consumer)


@pytest.mark.slow
def test_cumulative_ack(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(topic)
    for i in range(5):
        producer.send(b"%d" % i)
    messages = receive_n(consumer, 5, ack=False)
    consumer.acknowledge_cumulative(messages[2])
    consumer.close()
    consumer = magnetar_client.subscribe(topic, "sub")
    assert [m.data() for m in receive_n(consumer, 2)] == [b"3", b"4"]
    shared = magnetar_client.subscribe(topic, "shared", consumer_type=ConsumerType.Shared)
    with pytest.raises(Exception, match="cumulative"):
        shared.acknowledge_cumulative(messages[0])


@pytest.mark.slow
def test_seek_and_last_message_id(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    assert consumer.get_last_message_id().entry_id() == -1
    producer = magnetar_client.create_producer(topic)
    ids = [producer.send(b"%d" % i) for i in range(5)]
    assert consumer.get_last_message_id() == ids[-1]
    receive_n(consumer, 5)
    consumer.seek(ids[1])
    assert [m.data() for m in receive_n(consumer, 3)] == [b"2", b"3", b"4"]
    consumer.seek(MessageId.earliest)
    assert [m.data() for m in receive_n(consumer, 5)] == [b"%d" % i for i in range(5)]


def test_reader_from_earliest_latest_and_an_id(magnetar_client, topic):
    producer = magnetar_client.create_producer(topic)
    ids = [producer.send(b"%d" % i) for i in range(4)]
    reader = magnetar_client.create_reader(topic, MessageId.earliest)
    assert [reader.read_next(3000).data() for _ in range(4)] == [b"0", b"1", b"2", b"3"]
    assert not reader.has_message_available()
    after = magnetar_client.create_reader(topic, ids[1])
    assert after.read_next(3000).data() == b"2"
    inclusive = magnetar_client.create_reader(topic, ids[1], start_message_id_inclusive=True)
    assert inclusive.read_next(3000).data() == b"1"
    latest = magnetar_client.create_reader(topic, MessageId.latest)
    producer.send(b"new")
    assert latest.read_next(3000).data() == b"new"
    assert reader.read_next(3000).data() == b"new"


def test_message_listener(magnetar_client, topic):
    got, done, listener = collecting_listener(3)
    magnetar_client.subscribe(topic, "sub", message_listener=listener)
    producer = magnetar_client.create_producer(topic)
    for i in range(3):
        producer.send(b"%d" % i)
    assert done.wait(5) and got == [b"0", b"1", b"2"]


def test_flow_control_refills_past_the_queue_size(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub", receiver_queue_size=10)
    producer = magnetar_client.create_producer(topic, batching_enabled=True)
    for i in range(200):
        producer.send_async(b"%d" % i, None)
    producer.flush()
    messages = receive_n(consumer, 200)
    assert [m.data() for m in messages] == [b"%d" % i for i in range(200)]


def test_receive_timeout_and_closed_errors(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    with pytest.raises(Timeout):
        consumer.receive(100)
    consumer.close()
    with pytest.raises(Exception, match="closed"):
        consumer.receive(100)


def test_partitioned_topic_round_trip(broker, magnetar_client, topic):

    path = topic.replace("persistent://", "")
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/persistent/{path}/partitions",
        data=json.dumps(3).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 204
    assert len(magnetar_client.get_topic_partitions(topic)) == 3
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(topic)
    sent = {producer.send(b"%d" % i, partition_key=f"key{i}").partition() for i in range(12)}
    assert sent <= {0, 1, 2}
    got = sorted(m.data() for m in receive_n(consumer, 12))
    assert got == sorted(b"%d" % i for i in range(12))


def test_a_partition_named_directly_keeps_its_index_in_message_ids(magnetar_client, broker, topic):
    """As Pulsar's clients: a producer or consumer of ``<topic>-partition-1`` gives ids of partition 1."""
    path = topic.replace("persistent://", "")
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/persistent/{path}/partitions",
        data=json.dumps(2).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 204
    consumer = magnetar_client.subscribe(f"{topic}-partition-1", "sub")
    producer = magnetar_client.create_producer(f"{topic}-partition-1")
    assert producer.send(b"one").partition() == 1
    (message,) = receive_n(consumer, 1)
    assert message.message_id().partition() == 1
    consumer.acknowledge(message)


@pytest.mark.slow
def test_asyncio_api(broker, topic):
    async def main():
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            consumer = await client.subscribe(topic, "sub")
            async with await client.create_producer(topic, batching_enabled=True) as producer:
                futures = [await producer.send_async(b"%d" % i) for i in range(20)]
                ids = await asyncio.gather(*futures)
            received = []
            for _ in range(20):
                msg = await consumer.receive(3000)
                await consumer.acknowledge(msg)
                received.append(msg.message_id())
            assert received == ids
            with pytest.raises(Timeout):
                await consumer.receive(100)

    asyncio.run(main())


def test_a_seek_on_a_non_persistent_topic_is_refused_and_the_consumer_goes_on(magnetar_client, topic):
    np_topic = topic.replace("persistent://", "non-persistent://", 1)
    consumer = magnetar_client.subscribe(np_topic, "sub")
    producer = magnetar_client.create_producer(np_topic)
    with pytest.raises(Exception, match="seek is not supported on non-persistent topics"):
        consumer.seek(MessageId.earliest)
    with pytest.raises(Exception, match="non-persistent topics keep no last message id"):
        consumer.get_last_message_id()
    producer.send(b"after")
    assert consumer.receive(5000).data() == b"after"
