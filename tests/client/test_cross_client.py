"""Our client and the official pulsar-client on the same topics, both ways."""

from __future__ import annotations

import os
import threading

import pulsar
import pytest

from magnetar.client import CompressionType, InitialPosition, MessageId, Timeout

from .proxy import ShrinkingProxy

pytestmark = pytest.mark.interop

OFFICIAL_CODECS = {
    CompressionType.NONE: pulsar.CompressionType.NONE,
    CompressionType.LZ4: pulsar.CompressionType.LZ4,
    CompressionType.ZLIB: pulsar.CompressionType.ZLib,
    CompressionType.ZSTD: pulsar.CompressionType.ZSTD,
    CompressionType.SNAPPY: pulsar.CompressionType.SNAPPY,
}


@pytest.fixture
def official(broker, client_factory):
    return client_factory(broker.service_url)


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_official_batches_to_our_consumer(official, magnetar_client, topic, codec):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = official.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=7,
        batching_max_publish_delay_ms=1000,
        compression_type=OFFICIAL_CODECS[codec],
    )
    payloads = [(b"official-%d|" % i) * (50 + i) for i in range(20)]
    ids = []
    for data in payloads:
        producer.send_async(data, lambda res, msg_id: ids.append(msg_id), properties={"n": str(len(data))})
    producer.flush()
    received = []
    for _ in payloads:
        msg = consumer.receive(5000)
        consumer.acknowledge(msg)
        received.append(msg)
    assert [m.data() for m in received] == payloads
    assert all(m.properties() == {"n": str(len(m.data()))} for m in received)
    assert {m.message_id().batch_size() for m in received} == {7, 6}
    theirs = sorted((i.ledger_id(), i.entry_id(), i.batch_index()) for i in ids)
    ours = [
        (m.message_id().ledger_id(), m.message_id().entry_id(), m.message_id().batch_index())
        for m in received
    ]
    assert ours == theirs


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_our_batches_to_official_consumer(official, magnetar_client, topic, codec):
    consumer = official.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(
        topic, batching_enabled=True, batching_max_messages=5, compression_type=codec
    )
    payloads = [(b"ours-%d|" % i) * (30 + i) for i in range(12)]
    for data in payloads:
        producer.send_async(data, None, partition_key="k", properties={"a": "b"})
    producer.flush()
    received = [consumer.receive(5000) for _ in payloads]
    for msg in received:
        consumer.acknowledge(msg)
    assert [m.data() for m in received] == payloads
    assert all(m.partition_key() == "k" and m.properties() == {"a": "b"} for m in received)


def test_official_single_messages_to_our_consumer(official, magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = official.create_producer(
        topic, batching_enabled=False, compression_type=pulsar.CompressionType.LZ4
    )
    sent = [producer.send(b"m%d" % i, event_timestamp=42 + i, partition_key="pk") for i in range(5)]
    got = [consumer.receive(5000) for _ in range(5)]
    assert [m.data() for m in got] == [b"m%d" % i for i in range(5)]
    assert [m.event_timestamp() for m in got] == [42 + i for i in range(5)]
    # The ids the official client got back serialize to ours, byte for byte.
    assert [MessageId.deserialize(i.serialize()) for i in sent] == [m.message_id() for m in got]


def test_our_single_messages_to_official_reader(official, magnetar_client, topic):
    producer = magnetar_client.create_producer(topic, compression_type=CompressionType.ZSTD)
    ids = [producer.send(b"r%d" % i, event_timestamp=7) for i in range(3)]
    reader = official.create_reader(topic, pulsar.MessageId.deserialize(ids[0].serialize()))
    got = [reader.read_next(5000) for _ in range(2)]
    assert [m.data() for m in got] == [b"r1", b"r2"]
    assert all(m.event_timestamp() == 7 for m in got)


def test_official_chunked_20mb_to_our_consumer(official, magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    producer = official.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    data = os.urandom(20 * 1024 * 1024)
    sent = []
    done = threading.Event()
    producer.send_async(data, lambda res, msg_id: (sent.append((res, msg_id)), done.set()))
    assert done.wait(30), "the chunked send completed"
    assert sent[0][0] == pulsar.Result.Ok
    msg = consumer.receive(20_000)
    assert len(msg.data()) == len(data) and msg.data() == data
    assert MessageId.deserialize(sent[0][1].serialize()) == msg.message_id()
    assert len(msg.message_id().chunk_message_ids()) >= 4
    consumer.acknowledge(msg)
    consumer.close()
    again = magnetar_client.subscribe(topic, "sub")
    with pytest.raises(Timeout):
        again.receive(500)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD], ids=lambda c: c.name)
def test_official_chunked_20mb_to_our_consumer_through_a_proxy(
    broker, client_factory, magnetar_client, topic, codec
):
    """As above, with the official client told a limit 1 KiB below the broker's (see proxy.py)."""
    consumer = magnetar_client.subscribe(topic, "sub")
    data = os.urandom(12 * 1024 * 1024) + bytes(8 * 1024 * 1024)
    with ShrinkingProxy(broker.port) as proxy:
        official = client_factory(proxy.service_url)
        producer = official.create_producer(
            topic, batching_enabled=False, chunking_enabled=True, compression_type=OFFICIAL_CODECS[codec]
        )
        sent_id = producer.send(data, properties={"from": "official"})
        msg = consumer.receive(20_000)
        producer.close()
    assert msg.data() == data and msg.properties() == {"from": "official"}
    assert MessageId.deserialize(sent_id.serialize()) == msg.message_id()
    assert len(msg.message_id().chunk_message_ids()) >= 3
    consumer.acknowledge(msg)


def test_our_chunked_20mb_to_official_consumer(official, magnetar_client, topic):
    consumer = official.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = magnetar_client.create_producer(topic, chunking_enabled=True)
    data = os.urandom(20 * 1024 * 1024)
    sent_id = producer.send(data)
    assert len(sent_id.chunk_message_ids()) >= 4
    msg = consumer.receive(20_000)
    assert msg.data() == data
    assert MessageId.deserialize(msg.message_id().serialize()) == sent_id
    consumer.acknowledge(msg)


def test_our_compressed_chunks_to_official_consumer(official, magnetar_client, topic):
    consumer = official.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(
        topic, chunking_enabled=True, compression_type=CompressionType.LZ4
    )
    data = os.urandom(6 * 1024 * 1024) + bytes(6 * 1024 * 1024)
    producer.send(data)
    assert consumer.receive(20_000).data() == data
