"""Entries our consumer cannot use: discarded, acknowledged, and their permits given back.

The broker charges a batch's whole message count to the consumer's permits. A consumer that
discards a broken batch must return that many, or every such batch shrinks its window for good
(Pulsar's Java client returns one and stalls after enough of them).
"""

from __future__ import annotations

import time

import pytest

from magnetar.client.decode import counted_messages
from magnetar.protocol import wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import encode_frame
from magnetar.protocol.headers import encode_headers_and_payload
from tests.interop.support import RawConnection

BATCH = 5


def _broken_batch(producer_name: str, sequence_id: int) -> bytes:
    """Headers and payload of a batch that says it holds five messages but holds bytes that do not
    parse as one; its checksum is right, so the broker stores it."""
    meta = wire.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=int(time.time() * 1000),
        num_messages_in_batch=BATCH,
    )
    return encode_headers_and_payload(meta, b"\x00\x00\x00\x40not a batch")


def _store_broken_batches(port: int, topic: str, count: int) -> None:
    raw = RawConnection(port)
    try:
        raw.handshake()
        name = raw.create_producer(topic)
        for seq in range(count):
            send = wire.CommandSend(producer_id=1, sequence_id=seq, num_messages=BATCH)
            raw.send(encode_frame(wrap(send), _broken_batch(name, seq)))
            raw.expect(wire.BaseCommand.SEND_RECEIPT)
    finally:
        raw.close()


@pytest.mark.parametrize("queue", [10, 0])
def test_broken_batches_give_their_permits_back_and_are_not_redelivered(
    broker_factory, magnetar_factory, topic, queue
):
    # A broker that stores batches unchecked (as Pulsar's does): ours refuses them by default.
    broker = broker_factory({"validate_batches_on_publish": False})
    magnetar_client = magnetar_factory(broker.service_url)
    consumer = magnetar_client.subscribe(topic, "sub", receiver_queue_size=queue)
    _store_broken_batches(broker.port, topic, count=6)  # 30 messages' worth: three times the queue
    producer = magnetar_client.create_producer(topic)
    producer.send(b"good")
    msg = consumer.receive(5000)
    assert msg.data() == b"good"
    consumer.acknowledge(msg)
    consumer.close()
    # The broken entries were acknowledged when they were discarded: nothing comes again, and a
    # later message is the first the subscription gives.
    again = magnetar_client.subscribe(topic, "sub", receiver_queue_size=queue)
    producer.send(b"later")
    assert again.receive(5000).data() == b"later"


def _entry(meta: wire.MessageMetadata, payload: bytes) -> memoryview:
    return memoryview(encode_headers_and_payload(meta, payload))


def test_counted_messages_reads_the_batch_size_past_a_bad_checksum():
    meta = wire.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=7)
    data = bytearray(_entry(meta, b"payload"))
    data[-1] ^= 0xFF  # the payload no longer matches the checksum
    assert counted_messages(memoryview(data)) == 7
    single = wire.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    assert counted_messages(_entry(single, b"one")) == 1


def test_counted_messages_is_one_when_the_metadata_does_not_parse():
    assert counted_messages(memoryview(b"\x0e\x01\x00\x00\x00\x00\xff\xff\xff\xff")) == 1
    assert counted_messages(memoryview(b"")) == 1
