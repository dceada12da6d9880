"""Compaction by Pulsar's ``compactionThreshold`` (namespace and topic policies over the broker's
setting), and what compaction shows: the topic stats' ``compaction`` section, the
``pulsar_compaction_*`` metrics, the ``__compaction`` cursor and ``compactedLedger`` in internal
stats, with the official client."""

from __future__ import annotations

import time

import pulsar
import pytest

from tests.interop.compaction_support import compact, compaction_over, compaction_path, read_all, topic_path
from tests.interop.support import admin_call, scrape
from tests.waiting import eventually

pytestmark = pytest.mark.interop

#: Checked often, so that a test waits on the compaction, not on the monitor's interval.
FAST_MONITOR = {"broker_service_compaction_monitor_interval_in_seconds": 0.1}


def _namespace(broker, name: str) -> str:
    assert admin_call(broker, "PUT", f"/admin/v2/namespaces/{name}")[0] == 204
    return name


def _threshold_path(namespace: str) -> str:
    return f"/admin/v2/namespaces/{namespace}/compactionThreshold"


def _send(client, topic: str, count: int, keys: int, start: int = 0) -> list:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"v{i}".encode(), partition_key=f"k{i % keys}") for i in range(start, start + count)]
    producer.close()
    return ids


def _compacted(client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    try:
        return [m.data() for m in read_all(reader)]
    finally:
        reader.close()


@pytest.mark.slow  # two compactions by threshold, one after the other
def test_a_namespace_threshold_compacts_its_topics_by_themselves(broker_factory, client_factory):
    broker = broker_factory(FAST_MONITOR)
    client = client_factory(broker.service_url)
    namespace = _namespace(broker, "public/auto")
    path = _threshold_path(namespace)
    assert admin_call(broker, "GET", path) == (204, None)  # not set
    assert admin_call(broker, "PUT", path, -1) == (412, {"reason": "compactionThreshold must be 0 or more"})
    assert admin_call(broker, "PUT", path, "10M")[0] == 400
    assert admin_call(broker, "PUT", path, 100) == (204, None)
    assert admin_call(broker, "GET", path) == (200, 100)
    topic = f"persistent://{namespace}/positions"
    # 20 entries of far more than 100 bytes: compacted by itself (maybe more than once while they come)
    _send(client, topic, 20, keys=4)
    expected = [b"v16", b"v17", b"v18", b"v19"]
    eventually(lambda: _compacted(client, topic) == expected, what="a compaction by threshold")
    assert compaction_over(broker, topic)["status"] == "SUCCESS"
    _send(client, topic, 4, keys=4, start=20)  # past the threshold again: compacted again
    expected = [b"v20", b"v21", b"v22", b"v23"]
    eventually(lambda: _compacted(client, topic) == expected, what="the next compaction by threshold")
    assert admin_call(broker, "DELETE", path) == (204, None)
    assert admin_call(broker, "GET", path) == (204, None)


def test_a_topics_own_threshold_wins_over_its_namespaces_and_the_brokers(broker_factory, client_factory):
    broker = broker_factory({**FAST_MONITOR, "broker_service_compaction_threshold_in_bytes": 5_000_000})
    client = client_factory(broker.service_url)
    namespace = _namespace(broker, "public/own")
    off, on = f"persistent://{namespace}/off", f"persistent://{namespace}/on"
    assert admin_call(broker, "POST", topic_path(off) + "/compactionThreshold", 0) == (204, None)
    applied = topic_path(off) + "/compactionThreshold?applied=true"
    assert admin_call(broker, "GET", applied) == (200, 0)  # its own
    assert admin_call(broker, "GET", topic_path(on) + "/compactionThreshold?applied=true") == (200, 5_000_000)
    assert admin_call(broker, "PUT", _threshold_path(namespace), 1) == (204, None)
    assert admin_call(broker, "GET", topic_path(on) + "/compactionThreshold") == (
        204,
        None,
    )  # none of its own
    assert admin_call(broker, "GET", topic_path(on) + "/compactionThreshold?applied=true") == (200, 1)
    _send(client, off, 10, keys=2)  # the topic's 0 wins over its namespace's 1: never by itself
    _send(client, on, 10, keys=2)  # sent after: a pass that compacts it has looked at "off" too
    assert compaction_over(broker, on)["status"] == "SUCCESS"
    assert admin_call(broker, "GET", compaction_path(off)) == (200, {"status": "NOT_RUN", "lastError": ""})
    assert admin_call(broker, "DELETE", topic_path(off) + "/compactionThreshold") == (204, None)
    assert admin_call(broker, "GET", applied) == (200, 1)  # now its namespace's
    assert compaction_over(broker, off)["status"] == "SUCCESS"
    assert _compacted(client, off) == [b"v8", b"v9"]
    assert admin_call(broker, "POST", topic_path(off) + "/compactionThreshold", -5)[0] == 412
    assert admin_call(broker, "POST", topic_path(on) + "/compactionThreshold", 7) == (204, None)
    assert admin_call(broker, "DELETE", topic_path(on)) == (204, None)
    assert admin_call(broker, "GET", topic_path(on) + "/compactionThreshold") == (204, None)  # gone with it


def test_the_compaction_section_metrics_and_internal_stats(broker, client, topic):
    internal = admin_call(broker, "GET", topic_path(topic) + "/internalStats")
    assert internal[0] == 404  # no topic yet
    ids = _send(client, topic, 20, keys=4)
    status, stats = admin_call(broker, "GET", topic_path(topic) + "/stats")
    assert status == 200
    assert stats["compaction"] == {
        "lastCompactionRemovedEventCount": 0,
        "lastCompactionSucceedTimestamp": 0,
        "lastCompactionFailedTimestamp": 0,
        "lastCompactionDurationTimeInMills": 0,
    }
    _, internal = admin_call(broker, "GET", topic_path(topic) + "/internalStats")
    assert internal["compactedLedger"] == {
        "ledgerId": -1,
        "entries": -1,
        "size": -1,
        "offloaded": False,
        "underReplicated": False,
    }
    assert "__compaction" not in internal["cursors"]
    before = int(time.time() * 1000)
    compact(broker, topic)
    after = int(time.time() * 1000)
    _, stats = admin_call(broker, "GET", topic_path(topic) + "/stats")
    section = stats["compaction"]
    assert section["lastCompactionRemovedEventCount"] == 16
    assert before <= section["lastCompactionSucceedTimestamp"] <= after
    assert section["lastCompactionFailedTimestamp"] == 0
    assert 0 <= section["lastCompactionDurationTimeInMills"] <= after - before
    assert "__compaction" not in stats["subscriptions"]  # a cursor, not a subscription
    _, internal = admin_call(broker, "GET", topic_path(topic) + "/internalStats")
    ledger = internal["compactedLedger"]
    assert ledger["entries"] == 4 and ledger["size"] > 0 and ledger["ledgerId"] >= 0
    cursor = internal["cursors"]["__compaction"]
    last = ids[-1]
    assert cursor["markDeletePosition"] == f"{last.ledger_id()}:{last.entry_id()}"
    assert cursor["properties"] == {"CompactedTopicLedger": ledger["ledgerId"]}
    samples = scrape(broker)

    def metric(name: str) -> float:
        labels = (("cluster", "standalone"), ("namespace", "public/default"), ("topic", topic))
        return samples[(name, labels)]

    assert metric("pulsar_compaction_removed_event_count") == 16
    assert metric("pulsar_compaction_succeed_count") == 1
    assert metric("pulsar_compaction_failed_count") == 0
    assert metric("pulsar_compaction_duration_time_in_mills") >= 0
    assert metric("pulsar_compaction_compacted_entries_count") == 4
    assert metric("pulsar_compaction_compacted_entries_size") == ledger["size"]
    assert metric("pulsar_compaction_read_throughput") >= 0
    assert metric("pulsar_compaction_write_throughput") >= 0
