"""Reading stored messages over the admin API without consuming them (``pulsar-admin topics
peek-messages / get-message-by-id``), and expiring them (``expire-messages``), with messages
from the official client."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import datetime

import pulsar
import pytest

from magnetar.protocol.batch import iter_batch

from ..waiting import eventually
from .support import admin_call as call
from .support import receive_n

pytestmark = pytest.mark.interop


def _path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.split("://")[1]


def _get(broker, path: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(broker.http_url + path, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _peek(broker, topic: str, sub: str, n: int):
    return _get(broker, f"{_path(topic)}/subscription/{sub}/position/{n}")


def _backlog(broker, topic: str, sub: str) -> int:
    return call(broker, "GET", _path(topic) + "/stats")[1]["subscriptions"][sub]["msgBacklog"]


def test_peek_shows_the_next_messages_with_their_metadata_and_consumes_nothing(broker, client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, producer_name="writer", batching_enabled=False)
    before = int(time.time() * 1000)
    ids = [
        producer.send(
            b"m%d" % n, properties={"n": str(n), "kind": "test"}, partition_key=f"k{n}", event_timestamp=42
        )
        for n in range(3)
    ]
    status, headers, body = _peek(broker, topic, "sub", 1)
    assert (status, body) == (200, b"m0")
    assert headers["X-Pulsar-Message-ID"] == f"{ids[0].ledger_id()}:{ids[0].entry_id()}"
    assert json.loads(headers["X-Pulsar-PROPERTY"]) == {"n": "0", "kind": "test"}
    assert headers["X-Pulsar-partition-key"] == "k0"
    assert headers["X-Pulsar-producer-name"] == "writer"
    assert headers["X-Pulsar-sequence-id"] == "0"
    published = datetime.fromisoformat(headers["X-Pulsar-publish-time"]).timestamp() * 1000
    assert before - 1000 <= published <= time.time() * 1000
    assert datetime.fromisoformat(headers["X-Pulsar-event-time"]).timestamp() * 1000 == 42
    assert headers["X-Pulsar-Broker-Entry-METADATA-index"] == "0"
    assert "X-Pulsar-num-batch-message" not in headers
    assert _peek(broker, topic, "sub", 3)[2] == b"m2"
    status, _, body = _peek(broker, topic, "sub", 4)
    assert status == 404 and b"not found" in body
    assert _peek(broker, topic, "sub", 0)[0] == 400
    # Nothing was consumed: the backlog and the consumer's messages are all there.
    assert _backlog(broker, topic, "sub") == 3
    received = receive_n(consumer, 3)
    assert [m.data() for m in received] == [b"m0", b"m1", b"m2"]
    consumer.acknowledge_cumulative(received[0])
    # counts from the mark-delete position, once the grouped ack is in
    eventually(lambda: _peek(broker, topic, "sub", 1)[2] == b"m1", what="m1 first to peek")
    assert _peek(broker, topic, "sub", 9)[0] == 404
    assert _peek(broker, topic, "nobody", 1)[0] == 404


def test_peek_a_batch_and_a_compressed_message(broker, client, topic):
    client.subscribe(topic, "sub").close()
    batching = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    for n in range(5):
        batching.send_async(b"b%d" % n, None)
    batching.flush()
    lz4 = client.create_producer(topic, batching_enabled=False, compression_type=pulsar.CompressionType.LZ4)
    lz4.send(b"z" * 10_000)
    status, headers, body = _peek(broker, topic, "sub", 1)
    assert status == 200 and headers["X-Pulsar-num-batch-message"] == "5"
    assert [bytes(payload) for _, payload in iter_batch(body, 5)] == [b"b%d" % n for n in range(5)]
    status, headers, body = _peek(broker, topic, "sub", 2)
    assert (status, body) == (200, b"z" * 10_000)  # decompressed
    assert headers["X-Pulsar-compression"] == "LZ4" and headers["X-Pulsar-uncompressed-size"] == "10000"


def test_get_message_by_id(broker, client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"m%d" % n) for n in range(3)]
    second = ids[1]
    status, headers, body = _get(
        broker, f"{_path(topic)}/ledger/{second.ledger_id()}/entry/{second.entry_id()}"
    )
    assert (status, body) == (200, b"m1")
    assert headers["X-Pulsar-Message-ID"] == f"{second.ledger_id()}:{second.entry_id()}"
    assert _get(broker, f"{_path(topic)}/ledger/{second.ledger_id()}/entry/99")[0] == 404


def test_a_partitioned_topics_own_name_cannot_be_peeked(broker, client, topic):
    assert call(broker, "PUT", _path(topic) + "/partitions", 2)[0] == 204
    client.subscribe(topic, "sub").close()
    status, _, body = _peek(broker, topic, "sub", 1)
    assert status == 412 and b"partitioned" in body


@pytest.mark.slow
def test_expire_messages_older_than_some_seconds(broker, client, topic):
    client.subscribe(topic, "one").close()
    client.subscribe(topic, "two").close()
    client.subscribe(topic, "three").close()
    producer = client.create_producer(topic, batching_enabled=False)
    for n in range(3):
        producer.send(b"old%d" % n)
    time.sleep(2.5)  # the age is the behaviour: the old ones are now more than 2 s old, and the new not
    for n in range(2):
        producer.send(b"new%d" % n)
    assert call(broker, "POST", _path(topic) + "/subscription/one/expireMessages/2")[0] == 204
    assert [_backlog(broker, topic, s) for s in ("one", "two", "three")] == [2, 5, 5]
    assert call(broker, "POST", _path(topic) + "/all_subscription/expireMessages/2")[0] == 204
    assert [_backlog(broker, topic, s) for s in ("one", "two", "three")] == [2, 2, 2]
    assert call(broker, "POST", _path(topic) + "/subscription/nobody/expireMessages/2")[0] == 404
    consumer = client.subscribe(topic, "two")
    assert [m.data() for m in receive_n(consumer, 2)] == [b"new0", b"new1"]


def test_internal_stats_show_the_ledgers_and_each_cursors_acks(broker, client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"m%d" % n) for n in range(6)]
    messages = receive_n(consumer, 6)
    for i in (1, 2, 4):  # m0 unacked: holes at m0 and m3
        consumer.acknowledge(messages[i])
    ledger = ids[0].ledger_id()
    expected = f"[({ledger}:0..{ledger}:2], ({ledger}:3..{ledger}:4]]"

    def internal():
        status, body = call(broker, "GET", _path(topic) + "/internalStats")
        assert status == 200
        return body

    def acks_in() -> bool:  # the client groups acks
        cursor = internal()["cursors"]["sub"]
        assert cursor["individuallyDeletedMessages"] == expected, cursor
        return True

    eventually(acks_in, what="the acks at the broker")
    stats = internal()
    cursor = stats["cursors"]["sub"]
    assert cursor["markDeletePosition"] == f"{ledger}:-1"
    assert cursor["totalNonContiguousDeletedMessagesRange"] == 2
    assert cursor["numberOfEntriesSinceFirstNotAckedMessage"] == 6  # m0..m5 read, m0 the first not acked
    assert stats["numberOfEntries"] == 6 and stats["lastConfirmedEntry"] == f"{ledger}:{ids[-1].entry_id()}"
    assert [(entry["ledgerId"], entry["entries"]) for entry in stats["ledgers"]] == [(ledger, 6)]
    assert stats["totalSize"] == stats["ledgers"][0]["size"] > 6 * 2
    datetime.fromisoformat(stats["lastLedgerCreatedTimestamp"])
