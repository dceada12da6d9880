"""``GET /metrics``: Prometheus text with Pulsar's metric names, read from a real broker."""

from __future__ import annotations

import threading

from .support import admin_call, receive_n
from .test_flow_control import scrape


def test_metrics_describe_topics_and_connections(broker, client, topic):
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub")
    client.subscribe(topic, "other")
    for n in range(10):
        producer.send(b"m%d" % n)
    for message in receive_n(consumer, 4):
        consumer.acknowledge(message)

    labels = (("cluster", "standalone"), ("namespace", "public/default"), ("topic", topic))

    def settled(samples) -> bool:
        return samples.get(("pulsar_msg_backlog", labels)) == 16  # 6 left on "sub", 10 on "other"

    samples = scrape(broker)
    for _ in range(50):  # acks are grouped by the client: wait until they arrived
        if settled(samples):
            break
        threading.Event().wait(0.1)
        samples = scrape(broker)
    assert settled(samples)
    assert samples[("pulsar_producers_count", labels)] == 1
    assert samples[("pulsar_subscriptions_count", labels)] == 2
    assert samples[("pulsar_consumers_count", labels)] == 2
    assert samples[("pulsar_storage_size", labels)] > 10 * len(b"m0")
    assert samples[("pulsar_active_connections", ())] >= 1
    assert samples[("process_resident_memory_bytes", ())] > 0

    # Traffic: 10 messages in, each dispatched to both subscriptions' consumers.
    assert samples[("pulsar_in_messages_total", labels)] == 10
    in_bytes = samples[("pulsar_in_bytes_total", labels)]
    assert in_bytes > 10 * len(b"m0")
    assert samples[("pulsar_out_messages_total", labels)] == 20
    assert samples[("pulsar_out_bytes_total", labels)] >= 2 * in_bytes  # + broker entry metadata
    status, stats = admin_call(broker, "GET", "/admin/v2/persistent/" + topic.split("://")[1] + "/stats")
    assert status == 200
    assert (stats["msgInCounter"], stats["msgOutCounter"]) == (10, 20)
    assert stats["bytesInCounter"] == in_bytes
    assert stats["storageSize"] == samples[("pulsar_storage_size", labels)]
