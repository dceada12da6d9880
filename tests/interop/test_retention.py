"""Consumed ledgers are deleted by the background task unless the namespace's retention keeps them."""

from __future__ import annotations

import pytest

from ..waiting import eventually
from .support import admin_call as call
from .support import receive_n

pytestmark = pytest.mark.interop


def stats(broker, topic: str) -> dict:
    status, body = call(broker, "GET", f"/admin/v2/{topic.replace('://', '/')}/stats")
    assert status == 200, body
    return body


def ledger_count(broker, topic: str) -> int:
    return len(stats(broker, topic)["ledgers"])


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
    unconsumed = f"persistent://public/default/{name}-unconsumed"
    consumers = {topic: produce(client, topic) for topic in (dropped, kept, unconsumed)}
    assert all(ledger_count(broker, topic) > 3 for topic in consumers), "small ledgers rolled over"
    consume(consumers[kept])
    eventually(lambda: stats(broker, kept)["subscriptions"]["sub"]["msgBacklog"] == 0, what="kept consumed")
    consume(consumers[dropped])

    eventually(lambda: ledger_count(broker, dropped) == 1, what="only the current ledger left")
    # The pass that deleted them went over every topic, after the acks on ``kept`` were in.
    assert ledger_count(broker, kept) > 3, "retention keeps consumed ledgers"
    assert ledger_count(broker, unconsumed) > 3, "unconsumed ledgers stay"
