"""The official client's TableView (``client.create_table_view``) against Magnetar: a reader with
readCompacted from the earliest message of every partition, replaying up to the last message id the
broker names, then following. Its start waits on ``has_message_available``: a topic whose last
message the compacted view leaves out (a tombstone, a keyless message, the tail of a batch) must
still end it, as Pulsar's broker answers a readCompacted consumer's GET_LAST_MESSAGE_ID from the
compacted view."""

from __future__ import annotations

import threading

import pulsar
import pytest

from tests.interop.support import admin_call
from tests.waiting import eventually

pytestmark = pytest.mark.interop


def _compaction_path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/") + "/compaction"


def _compact(broker, topic: str, partitions: int = 0) -> None:
    """Compact ``topic`` (every partition of a partitioned one) and wait until each run succeeded."""
    status, body = admin_call(broker, "PUT", _compaction_path(topic))
    assert status == 204, body
    names = [f"{topic}-partition-{i}" for i in range(partitions)] if partitions else [topic]
    for name in names:

        def over(name=name):
            status, body = admin_call(broker, "GET", _compaction_path(name))
            assert status == 200 and body["status"] in ("SUCCESS", "ERROR"), body
            return body

        assert eventually(over, what=f"the compaction of {name} to end")["status"] == "SUCCESS"


def _table_view(client: pulsar.Client, topic: str):
    """``create_table_view``, which blocks until the replay is over, on a thread of its own: a replay
    that never ends fails the test here, with a reason, instead of hanging it."""
    made: list = []
    thread = threading.Thread(target=lambda: made.append(client.create_table_view(topic)), daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert made, "create_table_view did not return: its replay never reached the last message id"
    return made[0]


def _contents(table_view) -> dict[str, bytes]:
    seen: dict[str, bytes] = {}
    table_view.for_each(lambda key, value: seen.__setitem__(key, value))
    return seen


def test_the_table_view_of_a_compacted_topic_ending_in_a_tombstone(broker, client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(100):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 5}")
    producer.send(b"", partition_key="k0")  # the topic's last message: a tombstone
    _compact(broker, topic)
    table_view = _table_view(client, topic)
    expected = {f"k{i}": f"v{95 + i}".encode() for i in range(1, 5)}
    assert len(table_view) == 4
    assert _contents(table_view) == expected
    assert table_view.get("k3") == b"v98"
    assert table_view.get("k0") is None  # removed by its tombstone
    assert table_view.get("nobody") is None

    heard: list[tuple[str, bytes]] = []
    table_view.for_each_and_listen(lambda key, value: heard.append((key, value)))
    assert sorted(heard) == sorted(expected.items())  # what it holds first, then what comes
    producer.send(b"new", partition_key="k5")
    producer.send(b"updated", partition_key="k1")
    producer.send(b"", partition_key="k2")
    eventually(lambda: heard[4:] == [("k5", b"new"), ("k1", b"updated"), ("k2", b"")], what="the updates")
    assert _contents(table_view) == {"k1": b"updated", "k3": b"v98", "k4": b"v99", "k5": b"new"}
    table_view.close()


def test_a_compacted_batch_whose_last_messages_were_compacted_out(broker, client, topic):
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=5, batching_max_publish_delay_ms=60_000
    )
    for key, value in (("a", b"a1"), ("b", b"b1"), ("c", b"c1"), (None, b"no key"), ("b", b"")):
        if key is None:
            producer.send_async(value, None)
        else:
            producer.send_async(value, None, partition_key=key)
    producer.flush()  # one batch: the view keeps a1 and c1, at indexes 0 and 2 of 5
    _compact(broker, topic)
    table_view = _table_view(client, topic)
    assert _contents(table_view) == {"a": b"a1", "c": b"c1"}
    table_view.close()


def test_a_table_view_over_every_partition_before_and_after_compaction(broker, client, topic):
    status, body = admin_call(broker, "PUT", "/admin/v2/" + topic.replace("://", "/") + "/partitions", 3)
    assert status == 204, body
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(60):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 12}")
    for key in ("k0", "k7"):
        producer.send(b"", partition_key=key)
    expected = {f"k{i}": f"v{48 + i}".encode() for i in range(12) if i not in (0, 7)}
    before = _table_view(client, topic)  # nothing compacted yet: it reads every message
    # The C++ client's reader of a partitioned topic counts the bytes it holds, not the messages, to
    # tell whether one is still to come (MultiTopicsConsumerImpl::hasMessageAvailableAsync): a
    # tombstone, 0 bytes, may still be in its queue when the table view's start ends, and comes
    # just after. (The compacted view has no tombstone: the start below holds them all at once.)
    eventually(lambda: _contents(before) == expected, what="the tombstones of the last messages")
    before.close()
    _compact(broker, topic, partitions=3)
    after = _table_view(client, topic)
    assert _contents(after) == expected
    assert len(after) == 10
    producer.send(b"late", partition_key="k0")  # after the horizon: followed on its partition
    eventually(lambda: after.get("k0") == b"late", what="a message sent after the table view's start")
    after.close()
