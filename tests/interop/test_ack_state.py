"""PIP 81 with the official client: 12,499 ack holes over a dozen ack-state pages survive a SIGTERM
restart, none dropped, none lost."""

from __future__ import annotations

import json
import urllib.request

import pulsar
import pytest

from tests.waiting import eventually

from .support import assert_next_is_marker, receive_n

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: 25,000 messages and a restart

#: 12,499 ack holes: more than Pulsar keeps before it drops ranges (10,000).
TOTAL = 25_000
CONFIG = {
    "max_ledger_size_bytes": 128 * 1024,  # about a dozen ledgers, so the acks span many pages
    "max_individual_ack_cache_bytes_per_cursor": 32 * 1024,  # fewer pages than that in memory at once
    "fsync_policy": "interval",
}


def subscription_stats(broker, topic: str, sub: str) -> dict:
    path = topic.replace("persistent://", "")
    with urllib.request.urlopen(
        f"{broker.http_url}/admin/v2/persistent/{path}/stats", timeout=10
    ) as response:
        return json.load(response)["subscriptions"][sub]


def test_every_other_ack_of_25_000_messages_survives_a_restart(broker_factory, client_factory, topic):
    broker = broker_factory(CONFIG)
    client = client_factory(broker.service_url)
    consumer = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5000
    )
    producer = client.create_producer(
        topic, batching_enabled=False, max_pending_messages=20_000, block_if_queue_full=True
    )
    failures = []
    for i in range(TOTAL):
        producer.send_async(b"%d" % i, lambda res, _id: res == pulsar.Result.Ok or failures.append(res))
    producer.flush()
    assert not failures

    seen = []
    for msg in receive_n(consumer, TOTAL):
        seen.append(int(msg.data()))
        if seen[-1] % 2 == 0:
            consumer.acknowledge(msg)
    assert sorted(seen) == list(range(TOTAL)), "each message once"
    consumer.close()  # sends the grouped acks
    expected_holes = TOTAL // 2 - 1  # entry 0 is acked: the mark-delete position moves over it
    eventually(
        lambda: subscription_stats(broker, topic, "sub")["ackState"]["holes"] == expected_holes,
        timeout=30,
        interval=0.2,
        what=f"{expected_holes} holes in the ack state",
    )
    before = subscription_stats(broker, topic, "sub")["ackState"]
    assert before["individually_deleted"] == expected_holes
    assert before["pages"] > 5 and before["pages_in_memory"] < before["pages"], before
    client.close()

    assert broker.stop() == 0, broker.log_tail()
    broker.restart(same_port=False)

    client = client_factory(broker.service_url)
    after = subscription_stats_after_load(broker, client, topic)
    assert after["holes"] == expected_holes and after["pages_in_memory"] == 0, after
    consumer = client.subscribe(
        topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5000
    )
    back = [int(m.data()) for m in receive_n(consumer, TOTAL // 2)]
    assert len(back) == TOTAL // 2, "exactly the unacked messages, each once"
    assert set(back) == set(range(1, TOTAL, 2)), "none of the acked ones"
    stats = subscription_stats(broker, topic, "sub")["ackState"]
    assert (
        stats["memory_bytes"] <= CONFIG["max_individual_ack_cache_bytes_per_cursor"]
        or stats["pages_in_memory"] == 1
    )
    assert_next_is_marker(consumer, client.create_producer(topic))  # nothing more: none of the acked ones


def subscription_stats_after_load(broker, client, topic: str) -> dict:
    """Load the topic with a reader (which touches no durable cursor) and read the subscription's figures."""
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    stats = subscription_stats(broker, topic, "sub")["ackState"]
    reader.close()
    return stats
