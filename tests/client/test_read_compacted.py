"""Our client's ``is_read_compacted`` (the official client's name) on a real broker: a reader and
Exclusive and Failover consumers get the latest message of each key up to the horizon, with the
original message ids, then what follows; Shared is refused with Pulsar's error."""

from __future__ import annotations

import pytest

from magnetar.client import ConsumerType, InitialPosition, MessageId, NotAllowedError
from magnetar.client.admin import AdminClient
from tests.waiting import eventually


def _compact(broker, topic: str) -> None:
    admin = AdminClient(broker.http_url)
    admin.topics.trigger_compaction(topic)
    eventually(lambda: admin.topics.compaction_status(topic)["status"] == "SUCCESS", what="the compaction")


def test_readers_and_exclusive_and_failover_consumers_read_compacted(broker, magnetar_client, topic):
    producer = magnetar_client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}") for i in range(12)]
    _compact(broker, topic)
    producer.send(b"after", partition_key="k0")
    expected = [b"v9", b"v10", b"v11", b"after"]
    reader = magnetar_client.create_reader(topic, MessageId.earliest, is_read_compacted=True)
    got = [reader.read_next(timeout_millis=5000) for _ in range(4)]
    assert [m.data() for m in got] == expected
    assert [m.message_id() for m in got[:3]] == ids[9:]  # the original ids
    assert not reader.has_message_available()
    for kind in (ConsumerType.Exclusive, ConsumerType.Failover):
        consumer = magnetar_client.subscribe(
            topic,
            f"sub-{kind.name}",
            consumer_type=kind,
            initial_position=InitialPosition.Earliest,
            is_read_compacted=True,
        )
        received = [consumer.receive(timeout_millis=5000) for _ in range(4)]
        assert [m.data() for m in received] == expected, kind
        for message in received:
            consumer.acknowledge(message)
        consumer.close()
    with pytest.raises(NotAllowedError, match="readCompacted only allowed on failover or exclusive"):
        magnetar_client.subscribe(topic, "shared", consumer_type=ConsumerType.Shared, is_read_compacted=True)
