"""Chunked messages with broker deduplication on: every chunk carries the message's sequence
id, so only the last chunk may be checked (as Pulsar's MessageDeduplication does)."""

from __future__ import annotations

import os

import pytest

from magnetar.client import ChunkMessageId, Client

SMALL = 64 * 1024


@pytest.mark.slow
def test_chunked_messages_pass_deduplication_and_sequence_ids_survive_a_restart(broker_factory, topic):
    broker = broker_factory({"deduplication_enabled": True, "max_message_size": SMALL})
    payloads = [os.urandom(5 * SMALL + 123), b"small", os.urandom(3 * SMALL)]
    with Client(broker.service_url, operation_timeout_seconds=10) as client:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, producer_name="camera", chunking_enabled=True)
        ids = [producer.send(p) for p in payloads]
        assert isinstance(ids[0], ChunkMessageId) and ids[0].ledger_id() >= 0
        for payload in payloads:
            msg = consumer.receive(10_000)
            assert msg.data() == payload
            consumer.acknowledge(msg)
        assert producer.last_sequence_id() == 2
    broker.stop()
    broker.restart()
    with Client(broker.service_url, operation_timeout_seconds=10) as client:
        producer = client.create_producer(topic, producer_name="camera", chunking_enabled=True)
        assert producer.last_sequence_id() == 2, "recovered from the last chunk, not a leading one"
