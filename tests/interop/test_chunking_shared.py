"""Chunked messages on a Shared subscription: every chunk of a message goes to one consumer,
so each consumer assembles whole messages (Pulsar refuses chunking on Shared)."""

from __future__ import annotations

import hashlib
import os

import pulsar
import pytest

from .support import receive_spread

pytestmark = pytest.mark.interop


def test_shared_consumers_each_get_whole_chunked_messages(broker_factory, client_factory, topic):
    broker = broker_factory({"max_message_size": 64 * 1024})
    client = client_factory(broker.service_url)
    consumers = [
        client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5)
        for _ in range(2)
    ]
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    payloads = [os.urandom(200 * 1024 + i) for i in range(10)]
    for payload in payloads:
        producer.send_async(payload, None)
        producer.send_async(b"small", None)
    producer.flush()

    got = receive_spread(consumers, producer, expected=2 * len(payloads))
    large = [m for messages in got for m in messages if m != b"small"]
    assert sorted(hashlib.sha256(m).digest() for m in large) == sorted(
        hashlib.sha256(p).digest() for p in payloads
    ), "every chunked message arrived whole exactly once"
    assert sum(m == b"small" for messages in got for m in messages) == 10
    assert all(got), "both consumers took part"
