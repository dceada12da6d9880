"""Our client's TableView on a real broker, blocking and asyncio: the latest value of each key over
every partition, read compacted, tombstones removing keys, what is sent after its start followed,
``refresh`` waiting for what the broker has, listeners on the listener thread (blocking) or the loop
(asyncio), and the official client's option names."""

from __future__ import annotations

import asyncio
import threading

import pulsar
import pytest

from magnetar.client import AlreadyClosed, MessageId, UnsupportedOption, aio
from magnetar.client.admin import AdminClient
from tests.waiting import eventually


def _compact(broker, topic: str, partitions: int = 0) -> None:
    admin = AdminClient(broker.http_url)
    admin.topics.trigger_compaction(topic)
    names = [f"{topic}-partition-{i}" for i in range(partitions)] if partitions else [topic]
    for name in names:

        def over(name=name):
            status = admin.topics.compaction_status(name)
            assert status["status"] in ("SUCCESS", "ERROR"), status
            return status

        assert eventually(over, what=f"the compaction of {name}")["status"] == "SUCCESS"


def test_the_blocking_table_view_of_a_compacted_topic(broker, magnetar_client, topic):
    producer = magnetar_client.create_producer(topic)
    for i in range(50):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 5}")
    producer.send(b"", partition_key="k0")  # the last message, a tombstone: it must end the start
    _compact(broker, topic)
    table_view = magnetar_client.create_table_view(topic, "tv-sub")
    expected = {f"k{i}": f"v{45 + i}".encode() for i in range(1, 5)}
    assert table_view.snapshot() == expected
    assert (len(table_view), table_view.size(), table_view.is_empty()) == (4, 4, False)
    assert table_view.get("k2") == b"v47"
    assert table_view.get("k0") is None and "k0" not in table_view
    assert "k1" in table_view and table_view.contains_key("k1")
    assert sorted(table_view.keys()) == sorted(expected)
    assert sorted(table_view.values()) == sorted(expected.values())
    assert sorted(table_view.items()) == sorted(expected.items())
    seen: dict[str, bytes] = {}
    table_view.for_each(seen.__setitem__)
    assert seen == expected
    assert str(table_view) == f"TableView(topic={topic}, subscription=tv-sub)"

    heard: list[tuple[str, bytes, str]] = []

    def hear(key: str, value: bytes) -> None:
        heard.append((key, value, threading.current_thread().name))

    table_view.for_each_and_listen(hear)
    assert sorted(k for k, _, _ in heard) == sorted(expected)  # the keys held, before it returned
    producer.send(b"new", partition_key="k9")
    producer.send(b"", partition_key="k1")
    producer.send(b"keyless")  # changes nothing
    table_view.refresh()  # everything sent above is applied when it returns
    assert table_view.get("k9") == b"new" and table_view.get("k1") is None
    assert len(table_view) == 4
    eventually(lambda: [(k, v) for k, v, _ in heard[4:]] == [("k9", b"new"), ("k1", b"")], what="the changes")
    assert all(name.startswith("magnetar-listener") for _, _, name in heard)

    table_view.close()
    assert table_view.get("k9") == b"new"  # what it held stays readable
    with pytest.raises(AlreadyClosed):
        table_view.refresh()


def test_the_asyncio_table_view_over_every_partition(broker, topic):
    AdminClient(broker.http_url).topics.create_partitioned_topic(topic, 3)

    async def main() -> None:
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            empty = await client.create_table_view(topic)  # no partition holds anything yet
            assert len(empty) == 0 and empty.is_empty()
            producer = await client.create_producer(topic)
            for i in range(40):
                await producer.send(f"v{i}".encode(), partition_key=f"k{i % 8}")
            await producer.send(b"", partition_key="k3")
            expected = {f"k{i}": f"v{32 + i}".encode() for i in range(8) if i != 3}
            await empty.refresh(timeout_millis=10_000)
            assert empty.snapshot() == expected  # followed since it started, on every partition
            await empty.close()

            _compact(broker, topic, partitions=3)
            table_view = await client.create_table_view(topic)
            assert table_view.snapshot() == expected
            assert sorted(table_view.keys()) == sorted(expected)
            assert dict(table_view.items()) == expected
            heard: list[tuple[str, bytes]] = []
            table_view.listen(lambda key, value: heard.append((key, value)))
            await producer.send(b"late", partition_key="k3")
            await table_view.refresh()
            assert table_view.get("k3") == b"late"
            assert heard == [("k3", b"late")]  # listeners run on the loop, before refresh returns
            await table_view.close()

    asyncio.run(main())


def test_a_compacted_batch_whose_last_messages_were_compacted_out(broker, magnetar_client, topic):
    producer = magnetar_client.create_producer(
        topic, batching_enabled=True, batching_max_messages=5, batching_max_publish_delay_ms=60_000
    )
    for key, value in (("a", b"a1"), ("b", b"b1"), ("c", b"c1"), (None, b"no key"), ("b", b"")):
        producer.send_async(value, None, partition_key=key)
    producer.flush()  # one batch: the view keeps a1 and c1, at indexes 0 and 2 of 5
    _compact(broker, topic)
    reader = magnetar_client.create_reader(topic, MessageId.earliest, is_read_compacted=True)
    got = []
    while reader.has_message_available():  # ends at c1: the broker names it the last message
        got.append(reader.read_next(timeout_millis=5000).data())
    assert got == [b"a1", b"c1"]
    table_view = magnetar_client.create_table_view(topic)
    assert table_view.snapshot() == {"a": b"a1", "c": b"c1"}


def test_for_each_and_listen_from_a_listener_runs_the_keys_held_there_first(broker, magnetar_client, topic):
    producer = magnetar_client.create_producer(topic)
    producer.send(b"1", partition_key="a")
    table_view = magnetar_client.create_table_view(topic)
    heard: list[tuple[str, bytes]] = []
    installed = threading.Event()

    def on_message(consumer, message) -> None:  # on the listener thread, where listeners run
        table_view.for_each_and_listen(lambda key, value: heard.append((key, value)))
        consumer.acknowledge(message)
        installed.set()

    magnetar_client.subscribe(topic + "-trigger", "s", message_listener=on_message)
    magnetar_client.create_producer(topic + "-trigger").send(b"go")
    assert installed.wait(10)
    assert heard == [("a", b"1")]
    producer.send(b"2", partition_key="a")
    eventually(lambda: heard == [("a", b"1"), ("a", b"2")], what="the change after the keys held")


def test_the_official_option_names(magnetar_factory):
    client = magnetar_factory("pulsar://127.0.0.1:9")  # never dialled: options are checked first
    with pytest.raises(UnsupportedOption, match="schema"):
        client.create_table_view("t", schema=pulsar.schema.StringSchema())
    with pytest.raises(TypeError, match="did you mean 'schema'"):
        client.create_table_view("t", schem=None)


def test_partitions_added_to_the_topic_are_followed_from_their_earliest_message(
    broker, magnetar_factory, topic
):
    """As the C++ client's reader of a partitioned topic (under the official TableView) does every
    partitionsUpdateInterval: a new partition is read from its earliest message, compacted."""
    admin = AdminClient(broker.http_url)
    admin.topics.create_partitioned_topic(topic, 2)
    client = magnetar_factory(broker.service_url, partitions_update_interval_seconds=0.1)
    producer = client.create_producer(topic)
    producer.send(b"first", partition_key="k0")
    table_view = client.create_table_view(topic)
    assert table_view.snapshot() == {"k0": b"first"}
    admin.topics.update_partitioned_topic(topic, 4)
    new = client.create_producer(f"{topic}-partition-3")  # sent before the view sees the partition
    for i in range(6):
        new.send(f"n{i}".encode(), partition_key=f"new-{i % 2}")
    _compact(broker, f"{topic}-partition-3")
    eventually(
        lambda: table_view.snapshot() == {"k0": b"first", "new-0": b"n4", "new-1": b"n5"},
        what="the new partition's keys in the table view",
    )
    new.send(b"later", partition_key="new-0")
    table_view.refresh()  # the new partitions' last messages too
    assert table_view.get("new-0") == b"later"
    table_view.close()
