"""The compacted view over a topic's life, with the official client: retention deleting the ledgers
it came from never deletes it (the next compaction builds on it, a restart finds it), and a topic
compacted then deleted leaves nothing behind: no file, no metadata, no compacted ledger; a topic of
the same name made again starts with no view."""

from __future__ import annotations

import sqlite3

import pulsar
import pytest

from tests.interop.compaction_support import compact, compaction_path, read_all, topic_path
from tests.interop.support import admin_call, receive_n
from tests.waiting import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: compactions, trimming and restarts

#: Small ledgers, deleted as soon as nothing holds them and retention lets them go.
TRIMMED = {
    "max_ledger_size_bytes": 300,
    "retention_check_interval_seconds": 0.1,
    "retention_time_seconds": 0,
    "retention_size_bytes": 0,
}


def _send(client, topic: str, values: range, keys: int) -> list:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"v{i}".encode(), partition_key=f"k{i % keys}") for i in values]
    producer.close()
    return ids


def _compacted(client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    try:
        return [m.data() for m in read_all(reader)]
    finally:
        reader.close()


def _internal(broker, topic: str) -> dict:
    status, internal = admin_call(broker, "GET", topic_path(topic) + "/internalStats")
    assert status == 200, internal
    return internal


def _compacted_files(broker) -> set[str]:
    return {path.name for path in broker.data_dir.rglob("compacted/*") if path.is_file()}


def _files_of(ledger_id: int) -> set[str]:
    return {f"{ledger_id:020d}.log", f"{ledger_id:020d}.idx"}


def test_retention_never_deletes_the_compacted_view(broker_factory, client_factory, topic):
    broker = broker_factory(TRIMMED)
    client = client_factory(broker.service_url)
    holder = client.subscribe(topic, "holder", initial_position=pulsar.InitialPosition.Earliest)
    ids = _send(client, topic, range(40), keys=8)  # held until compaction has read them
    compact(broker, topic)
    holder.unsubscribe()
    first = _internal(broker, topic)["compactedLedger"]["ledgerId"]

    def trimmed():
        ledgers = {ledger["ledgerId"] for ledger in _internal(broker, topic)["ledgers"]}
        return not ledgers & ({i.ledger_id() for i in ids} - {ids[-1].ledger_id()})

    eventually(trimmed, what="retention to delete the compacted ledgers' sources")
    assert _compacted_files(broker) == _files_of(first)  # not a ledger of the topic: retention never sees it
    assert _compacted(client, topic) == [f"v{i}".encode() for i in range(32, 40)]
    _send(client, topic, range(40, 44), keys=8)  # k0..k3 again
    compact(broker, topic)  # builds on the view, whose sources are gone
    expected = [f"v{i}".encode() for i in range(36, 44)]
    assert _compacted(client, topic) == expected
    second = _internal(broker, topic)["compactedLedger"]["ledgerId"]
    assert second != first
    assert _compacted_files(broker) == _files_of(second)  # the first view's went with the switch
    client.close()
    broker.stop()
    broker.restart()
    client = client_factory(broker.service_url)
    assert _compacted(client, topic) == expected


def test_a_topic_compacted_then_deleted_leaves_nothing_behind(broker, client_factory, topic):
    client = client_factory(broker.service_url)
    consumer = client.subscribe(
        topic,
        "sub",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
        is_read_compacted=True,
    )
    _send(client, topic, range(30), keys=5)
    compact(broker, topic)
    _send(client, topic, range(30, 40), keys=5)
    compact(broker, topic)  # a second view: the first one's ledger replaced
    receive_n(consumer, 5, ack=True)
    threshold = topic_path(topic) + "/compactionThreshold"
    assert admin_call(broker, "POST", threshold, 10_000_000) == (204, None)  # a policy of its own
    (directory,) = {path.parent.parent for path in broker.data_dir.rglob("compacted/*")}
    assert _compacted_files(broker)
    client.close()
    assert admin_call(broker, "DELETE", topic_path(topic)) == (204, None)
    assert not directory.exists()  # its ledgers, cursors and compacted ledger: all in it
    assert _compacted_files(broker) == set()
    assert admin_call(broker, "GET", compaction_path(topic))[0] == 404
    broker.stop()
    _assert_no_metadata(broker, topic)

    broker.restart()
    client = client_factory(broker.service_url)
    assert admin_call(broker, "GET", threshold) == (204, None)
    _send(client, topic, range(2), keys=1)  # the same name again: a new topic, no view
    assert _compacted(client, topic) == [b"v0", b"v1"]
    internal = _internal(broker, topic)
    assert internal["compactedLedger"]["ledgerId"] == -1
    assert internal["cursors"] == {}
    assert admin_call(broker, "GET", compaction_path(topic)) == (200, {"status": "NOT_RUN", "lastError": ""})


def _assert_no_metadata(broker, topic: str) -> None:
    """The stopped broker's metadata store names the topic nowhere, and holds no row of a managed
    ledger it no longer has (ledgers, cursors, properties such as the compacted ledger's record)."""
    db = sqlite3.connect(f"file:{broker.data_dir / 'metadata.sqlite'}?mode=ro", uri=True)
    try:
        assert db.execute("SELECT count(*) FROM managed_ledgers WHERE name = ?", (topic,)).fetchone() == (0,)
        for table in ("ledgers", "cursors", "properties", "places", "place_pages"):
            orphans = db.execute(
                f"SELECT count(*) FROM {table} WHERE ml_id NOT IN (SELECT id FROM managed_ledgers)"
            ).fetchone()
            assert orphans == (0,), table
        keys = [key for (key,) in db.execute("SELECT key FROM kv")]
        assert not [key for key in keys if topic.split("/")[-1] in key]
    finally:
        db.close()
