"""``GET /metrics``: Prometheus text with Pulsar's metric names, read from a real broker."""

from __future__ import annotations

import pulsar
import pytest

from ..waiting import eventually
from .conftest import CLIENT_LOGGER
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

    # acks are grouped by the client: wait until they arrived
    samples = eventually(lambda: settled(s := scrape(broker)) and s, what="a backlog of 16")
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


def _poll(read, until, what: str):
    """``read()`` again until ``until(value)`` holds; that value."""

    def check():
        value = read()
        assert until(value), value
        return value

    return eventually(check, what=what)


@pytest.mark.slow
def test_rates_over_the_stats_interval_in_topic_stats_and_metrics(broker_factory, client_factory, topic):
    interval = 0.5
    broker = broker_factory({"stats_update_frequency_seconds": interval})
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    size, count = 1_000, 40
    for n in range(count):
        producer.send(b"%04d" % n + b"x" * (size - 4))
    for message in receive_n(consumer, count):
        consumer.acknowledge(message)
    path = "/admin/v2/persistent/" + topic.split("://")[1] + "/stats"

    def stats():
        status, body = admin_call(broker, "GET", path)
        assert status == 200
        return body

    busy = _poll(stats, lambda s: s["msgRateIn"] > 0 and s["msgRateOut"] > 0, "rates in and out")
    # A rate is an interval's count over its length, a throughput its bytes: their ratio is the size
    # of what was sent. Bytes in are the producer's headers and payload, out add the broker entry
    # metadata.
    assert size < busy["averageMsgSize"] < size + 100
    assert size < busy["msgThroughputOut"] / busy["msgRateOut"] < size + 150
    (publisher,) = busy["publishers"]
    assert publisher["msgInCounter"] == count and publisher["bytesInCounter"] == busy["bytesInCounter"]
    sub = busy["subscriptions"]["sub"]
    (consumer_stats,) = sub["consumers"]
    assert sub["msgOutCounter"] == consumer_stats["msgOutCounter"] == count
    busy_sub = _poll(
        stats, lambda s: s["subscriptions"]["sub"]["msgRateOut"] > 0, "a rate out of the subscription"
    )
    assert size < busy_sub["msgThroughputOut"] / busy_sub["msgRateOut"] < size + 150

    labels = (("cluster", "standalone"), ("namespace", "public/default"), ("topic", topic))
    # The intervals after the traffic stopped: every rate falls back to zero.
    idle = _poll(stats, lambda s: s["msgRateIn"] == 0 and s["msgRateOut"] == 0, "rates of zero")
    assert (idle["msgRateIn"], idle["msgThroughputIn"], idle["averageMsgSize"]) == (0, 0, 0)
    assert idle["publishers"][0]["msgRateIn"] == 0
    assert idle["subscriptions"]["sub"]["consumers"][0]["msgRateOut"] == 0
    samples = scrape(broker)
    for name in ("pulsar_rate_in", "pulsar_rate_out", "pulsar_throughput_in", "pulsar_throughput_out"):
        assert samples[(name, labels)] == 0

    # And while messages flow, /metrics shows the same rates as the stats.
    for n in range(count):
        producer.send(b"%04d" % n + b"x" * (size - 4))
    samples = _poll(
        lambda: scrape(broker), lambda s: s[("pulsar_rate_in", labels)] > 0, "a rate in, in /metrics"
    )
    rate_in = samples[("pulsar_rate_in", labels)]
    assert size < samples[("pulsar_throughput_in", labels)] / rate_in < size + 100


def test_partitioned_stats_sum_the_partitions(broker_factory, client_factory, topic):
    broker = broker_factory({"stats_update_frequency_seconds": 0.5})
    client = client_factory(broker.service_url)
    path = "/admin/v2/persistent/" + topic.split("://")[1]
    assert admin_call(broker, "PUT", path + "/partitions", 3)[0] == 204
    consumer = client.subscribe(topic, "sub")
    round_robin = pulsar.PartitionsRoutingMode.RoundRobinDistribution
    producer = client.create_producer(
        topic, producer_name="writer", batching_enabled=False, message_routing_mode=round_robin
    )
    for n in range(30):
        producer.send(b"m%02d" % n)
    receive_n(consumer, 30)  # not acknowledged: a backlog of 30 over the partitions
    status, body = admin_call(broker, "GET", path + "/stats")
    assert status == 412 and "partitioned-stats" in body["reason"]
    total = _poll(
        lambda: admin_call(broker, "GET", path + "/partitioned-stats")[1],
        lambda s: s["msgRateIn"] > 0 and s["subscriptions"]["sub"]["msgBacklog"] == 30,
        "a rate in and a backlog of 30",
    )
    parts = total["partitions"]
    assert total["metadata"] == {"partitions": 3} and len(parts) == 3
    assert total["msgInCounter"] == 30 == sum(p["msgInCounter"] for p in parts.values())
    assert total["msgRateIn"] == pytest.approx(sum(p["msgRateIn"] for p in parts.values()))
    assert total["storageSize"] == sum(p["storageSize"] for p in parts.values()) > 0
    assert total["subscriptions"]["sub"]["msgBacklog"] == 30
    assert len(total["subscriptions"]["sub"]["consumers"]) == 3  # one per partition
    (publisher,) = total["publishers"]  # one producer name over the partitions
    assert (publisher["producerName"], publisher["msgInCounter"]) == ("writer", 30)
    short = admin_call(broker, "GET", path + "/partitioned-stats?perPartition=false")[1]
    assert short["partitions"] == {} and short["msgInCounter"] == 30
    plain = path + "-plain"
    client.create_producer(topic + "-plain").close()
    assert admin_call(broker, "GET", plain + "/partitioned-stats")[0] == 412


@pytest.mark.slow
def test_stats_of_a_stored_topic_not_loaded_and_of_a_non_persistent_one(broker, client, topic):
    producer = client.create_producer(topic)
    producer.send(b"kept")
    client.close()
    broker.stop()
    broker.restart()  # the topic is on disk, not loaded
    status, stats = admin_call(broker, "GET", "/admin/v2/persistent/" + topic.split("://")[1] + "/stats")
    assert status == 200 and stats["storageSize"] > 0 and stats["msgInCounter"] == 0
    assert admin_call(broker, "GET", "/admin/v2/persistent/public/default/never-used/stats")[0] == 404
    fresh = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=CLIENT_LOGGER)
    try:
        name = "non-persistent://public/default/np-" + topic.rsplit("-", 1)[1]
        consumer = fresh.subscribe(name, "sub")
        fresh.create_producer(name).send(b"live")
        receive_n(consumer, 1)
        status, stats = admin_call(broker, "GET", "/admin/v2/" + name.replace("://", "/") + "/stats")
        assert status == 200
        assert (stats["msgInCounter"], stats["storageSize"], stats["ledgers"]) == (1, 0, [])
        assert stats["subscriptions"]["sub"]["msgBacklog"] == 0
        assert stats["subscriptions"]["sub"]["msgOutCounter"] == 1
    finally:
        fresh.close()


def test_without_topic_level_metrics_each_namespace_has_one_series_of_its_topics_summed(
    broker_factory, client_factory, topic
):
    """Pulsar's exposeTopicLevelMetricsInPrometheus off: a scrape of 100,000 topics stays small."""
    broker = broker_factory({"expose_topic_level_metrics_in_prometheus": False})
    client = client_factory(broker.service_url)
    for suffix in ("a", "b"):
        producer = client.create_producer(f"{topic}-{suffix}")
        producer.send(b"one")
        client.subscribe(f"{topic}-{suffix}", "sub")
    namespace = (("cluster", "standalone"), ("namespace", "public/default"))
    samples = eventually(
        lambda: (s := scrape(broker)).get(("pulsar_producers_count", namespace)) == 2 and s,
        what="two producers in the namespace's series",
    )
    assert samples[("pulsar_subscriptions_count", namespace)] == 2
    assert samples[("pulsar_in_messages_total", namespace)] == 2
    assert not [key for key in samples if dict(key[1]).get("topic")], "a topic's own series"
