"""Topic compaction as a Pulsar user drives it, with the official client: the admin API's trigger and
status, readers with ``is_read_compacted=True`` and readCompacted Exclusive consumers getting the
latest message of each key up to the horizon then what follows, and Shared refused as Pulsar does."""

from __future__ import annotations

import json
import socket

import pulsar
import pytest

from magnetar.client import Client, ConsumerType, NotAllowedError
from tests.interop.compaction_support import compact as _compact
from tests.interop.compaction_support import compaction_path as _path
from tests.interop.compaction_support import read_all as _read_all
from tests.interop.support import admin_call
from tests.waiting import eventually

pytestmark = pytest.mark.interop


def _pipelined_puts(port: int, path: str) -> tuple[int, tuple[int, object]]:
    """Two PUTs of ``path`` sent in one write; the first's status, the second's status and JSON."""
    request = f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request * 2)
        reader = sock.makefile("rb")
        answers = []
        for _ in range(2):
            status = int(reader.readline().split()[1])
            headers = {}
            while (line := reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            body = reader.read(int(headers.get("content-length", "0")))
            answers.append((status, json.loads(body) if body else None))
    return answers[0][0], answers[1]


def test_a_reader_of_100_messages_over_5_keys_gets_5_after_compaction(broker, client, topic):
    assert admin_call(broker, "GET", _path(topic))[0] == 404  # no such topic yet
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"v{i}".encode(), partition_key=f"k{i % 5}") for i in range(100)]
    assert admin_call(broker, "GET", _path(topic)) == (200, {"status": "NOT_RUN", "lastError": ""})
    _compact(broker, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    got = _read_all(reader)
    assert [(m.partition_key(), m.data()) for m in got] == [
        (f"k{i}", f"v{95 + i}".encode()) for i in range(5)
    ]
    assert [str(m.message_id()) for m in got] == [str(i) for i in ids[95:]]  # the original ids
    full = client.create_reader(topic, pulsar.MessageId.earliest)  # without readCompacted: everything
    assert len(_read_all(full)) == 100


def test_tombstones_batches_keyless_messages_and_what_follows_the_horizon(broker, client, topic):
    batched = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=4, batching_max_publish_delay_ms=60_000
    )
    for key, value in (("a", b"a1"), ("b", b"b1"), (None, b"no key"), ("c", b"c1")):
        if key is None:
            batched.send_async(value, None)
        else:
            batched.send_async(value, None, partition_key=key)
    batched.flush()
    plain = client.create_producer(topic, batching_enabled=False)
    plain.send(b"", partition_key="b")  # a tombstone
    plain.send(b"a2", partition_key="a")
    _compact(broker, topic)
    plain.send(b"after", partition_key="b")  # after the horizon: read from the topic
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    got = [(m.partition_key(), m.data()) for m in _read_all(reader)]
    assert got == [("c", b"c1"), ("a", b"a2"), ("b", b"after")]


def test_an_exclusive_consumer_reads_compacted_and_shared_is_refused(broker, client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 2}")
    _compact(broker, topic)
    consumer = client.subscribe(
        topic,
        "compacted",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
        is_read_compacted=True,
    )
    got = [consumer.receive(timeout_millis=5000) for _ in range(2)]
    assert [m.data() for m in got] == [b"v8", b"v9"]
    for message in got:
        consumer.acknowledge(message)
    with pytest.raises(pulsar.InvalidConfiguration):  # the official client refuses it itself
        client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared, is_read_compacted=True)
    with Client(broker.service_url) as ours:  # ours asks, and the broker refuses as Pulsar's does
        for kind in (ConsumerType.Shared, ConsumerType.KeyShared):
            with pytest.raises(NotAllowedError, match="readCompacted only allowed on failover or exclusive"):
                ours.subscribe(topic, "shared", consumer_type=kind, is_read_compacted=True)


def test_the_compacted_view_is_read_after_a_restart(broker, client_factory, topic):
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 4}")
    _compact(broker, topic)
    client.close()
    broker.stop()
    broker.restart()
    client = client_factory(broker.service_url)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert [m.data() for m in _read_all(reader)] == [b"v16", b"v17", b"v18", b"v19"]


def test_a_second_compaction_while_one_runs_is_refused_with_409(broker, client, topic):
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    for i in range(20_000):
        producer.send_async(b"x" * 50, None, partition_key=f"k{i % 100}")
    producer.flush()
    # Both requests in one write on one connection (HTTP/1.1 pipelining): the broker answers the
    # second right after starting the first, while that compaction runs on its thread (tens of
    # ms for this topic), so the answer does not depend on how fast the machine is.
    first, second = _pipelined_puts(broker.http_port, _path(topic))
    assert first == 204
    assert second == (409, {"reason": "Compaction already in progress"})
    eventually(lambda: admin_call(broker, "GET", _path(topic))[1]["status"] == "SUCCESS")
