"""Consumed ledgers are deleted by the background task unless the namespace's retention keeps them."""

from __future__ import annotations

import time

import pytest

from .support import admin_call as call
from .support import receive_n

pytestmark = pytest.mark.interop


def ledger_count(broker, topic: str) -> int:
    status, stats = call(broker, "GET", f"/admin/v2/{topic.replace('://', '/')}/stats")
    assert status == 200
    return len(stats["ledgers"])


def produce(client, topic: str, n: int = 40):
    consumer = client.subscribe(topic, "sub")  # holds the data until it acknowledges
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(n):
        producer.send(b"x" * 300 + b"%d" % i)
    return consumer


def consume(consumer, n: int = 40) -> None:
    receive_n(consumer, n, ack=True)
    consumer.close()  # flushes the acks


def test_consumed_ledgers_go_unless_retention_keeps_them(broker_factory, client_factory, topic):
    broker = broker_factory(
        {
            "max_ledger_size_bytes": 2048,
            "retention_check_interval_seconds": 0.3,
            "cursor_flush_interval_seconds": 0.2,
        }
    )
    assert call(broker, "PUT", "/admin/v2/namespaces/public/keep")[0] == 204
    assert (
        call(
            broker,
            "POST",
            "/admin/v2/namespaces/public/keep/retention",
            {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1},
        )[0]
        == 204
    )
    client = client_factory(broker.service_url)
    name = topic.rsplit("/", 1)[1]
    dropped, kept = f"persistent://public/default/{name}", f"persistent://public/keep/{name}"
    consumers = [produce(client, dropped), produce(client, kept)]
    assert ledger_count(broker, dropped) > 3 and ledger_count(broker, kept) > 3, "small ledgers rolled over"
    time.sleep(0.6)
    assert ledger_count(broker, dropped) > 3, "unconsumed ledgers stay"
    for consumer in consumers:
        consume(consumer)

    deadline = time.monotonic() + 10
    while ledger_count(broker, dropped) > 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ledger_count(broker, dropped) == 1, "only the current ledger is left"
    assert ledger_count(broker, kept) > 3, "retention keeps consumed ledgers"
