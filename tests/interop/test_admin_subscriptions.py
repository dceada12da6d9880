"""A topic's subscriptions through Pulsar's admin v2 paths (``pulsar-admin topics
subscriptions / create-subscription / unsubscribe / clear-backlog / skip / reset-cursor``),
checked with the official client consuming."""

from __future__ import annotations

import time

import pulsar
import pytest

from ..waiting import eventually
from .support import admin_call as call
from .support import receive_n

pytestmark = pytest.mark.interop


def _path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.split("://")[1]


def _sub(topic: str, name: str) -> str:
    return f"{_path(topic)}/subscription/{name}"


def _produce(client, topic: str, count: int, start: int = 0) -> list:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"m%d" % n) for n in range(start, start + count)]
    producer.close()
    return ids


def _data(messages) -> list[bytes]:
    return [m.data() for m in messages]


def _backlog(broker, topic: str, name: str) -> int:
    status, stats = call(broker, "GET", _path(topic) + "/stats")
    assert status == 200
    return stats["subscriptions"][name]["msgBacklog"]


def test_a_subscription_created_ahead_keeps_what_is_produced_before_any_consumer(broker, client, topic):
    client.create_producer(topic).close()  # the topic exists, with no subscription
    assert call(broker, "GET", _path(topic) + "/subscriptions") == (200, [])
    assert call(broker, "PUT", _sub(topic, "ahead"))[0] == 204  # at the latest position
    assert call(broker, "PUT", _sub(topic, "ahead"))[0] == 409
    _produce(client, topic, 3)
    assert call(broker, "GET", _path(topic) + "/subscriptions") == (200, ["ahead"])
    assert _backlog(broker, topic, "ahead") == 3
    kept = client.subscribe(topic, "ahead")
    late = client.subscribe(topic, "late")  # the control: subscribes at the latest position now
    assert _data(receive_n(kept, 3)) == [b"m0", b"m1", b"m2"]
    _produce(client, topic, 1, start=3)
    assert _data(receive_n(late, 1)) == [b"m3"], "the control's next: one made before it would come first"


def test_a_subscription_created_at_earliest_or_at_a_message_id(broker, client, topic):
    ids = _produce(client, topic, 4)
    assert call(broker, "PUT", _sub(topic, "all"), {"ledgerId": -1, "entryId": -1})[0] == 204
    second = {"ledgerId": ids[1].ledger_id(), "entryId": ids[1].entry_id(), "partitionIndex": -1}
    assert call(broker, "PUT", _sub(topic, "from-second"), second)[0] == 204
    assert _data(receive_n(client.subscribe(topic, "all"), 4)) == [b"m0", b"m1", b"m2", b"m3"]
    assert _data(receive_n(client.subscribe(topic, "from-second"), 3)) == [b"m1", b"m2", b"m3"]
    status, _ = call(broker, "PUT", _sub(topic, "bad"), {"ledgerId": "one"})
    assert status == 400


def test_clear_backlog_and_skip(broker, client, topic):
    client.subscribe(topic, "cleared").close()
    client.subscribe(topic, "skipped").close()
    _produce(client, topic, 10)
    assert call(broker, "POST", _sub(topic, "cleared") + "/skip_all")[0] == 204
    assert call(broker, "POST", _sub(topic, "skipped") + "/skip/3")[0] == 204
    assert _backlog(broker, topic, "cleared") == 0
    assert _backlog(broker, topic, "skipped") == 7
    cleared = client.subscribe(topic, "cleared")  # its next message is m10 (below): nothing before it
    skipped = client.subscribe(topic, "skipped")
    assert _data(receive_n(skipped, 7)) == [b"m%d" % n for n in range(3, 10)]
    assert call(broker, "POST", _sub(topic, "skipped") + "/skip/100")[0] == 204  # past the end
    assert _backlog(broker, topic, "skipped") == 0
    assert call(broker, "POST", _sub(topic, "skipped") + "/skip/-1")[0] == 400
    _produce(client, topic, 1, start=10)
    assert _data(receive_n(cleared, 1)) == [b"m10"]


def test_skip_passes_over_entries_already_acknowledged(broker, client, topic):
    consumer = client.subscribe(topic, "sub")
    _produce(client, topic, 6)
    messages = receive_n(consumer, 6)
    consumer.acknowledge(messages[1])  # m1 and m2 acked out of order: a hole at m0
    consumer.acknowledge(messages[2])
    eventually(lambda: _backlog(broker, topic, "sub") == 4, what="the grouped acks at the broker")
    consumer.close()
    assert call(broker, "POST", _sub(topic, "sub") + "/skip/2")[0] == 204  # m0 and m3
    assert _backlog(broker, topic, "sub") == 2
    again = client.subscribe(topic, "sub")
    assert _data(receive_n(again, 2)) == [b"m4", b"m5"]


def test_reset_cursor_by_time_and_to_a_message_id(broker, client, topic):
    consumer = client.subscribe(topic, "sub")
    _produce(client, topic, 3)
    time.sleep(0.05)  # a broker time between m2's and m3's, in milliseconds: the pauses are the behaviour
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    ids = _produce(client, topic, 3, start=3)
    for message in receive_n(consumer, 6):
        consumer.acknowledge(message)
    # By time (broker time): the consumer is disconnected, comes back and gets m3.. again.
    assert call(broker, "POST", _sub(topic, "sub") + f"/resetcursor/{middle}")[0] == 204
    assert _data(receive_n(consumer, 3)) == [b"m3", b"m4", b"m5"]
    # To a message id, itself included or not.
    target = {"ledgerId": ids[1].ledger_id(), "entryId": ids[1].entry_id()}
    assert call(broker, "POST", _sub(topic, "sub") + "/resetcursor", target)[0] == 204
    assert _data(receive_n(consumer, 2)) == [b"m4", b"m5"]
    assert call(broker, "POST", _sub(topic, "sub") + "/resetcursor?isExcluded=true", target)[0] == 204
    assert _data(receive_n(consumer, 1)) == [b"m5"]
    _produce(client, topic, 1, start=6)
    assert _data(receive_n(consumer, 1)) == [b"m6"], "the next: m5 twice would come first"


def test_unsubscribe_refuses_while_consumers_are_connected_unless_forced(broker, client, topic):
    consumer = client.subscribe(topic, "sub")
    _produce(client, topic, 2)
    status, body = call(broker, "DELETE", _sub(topic, "sub"))
    assert status == 412 and "active connected consumers" in body["reason"]
    consumer.close()
    assert call(broker, "DELETE", _sub(topic, "sub"))[0] == 204
    assert call(broker, "GET", _path(topic) + "/subscriptions") == (200, [])
    assert call(broker, "DELETE", _sub(topic, "sub"))[0] == 404
    # Forced: the consumer is disconnected and the subscription deleted; the official client
    # subscribes again on its own (creating it anew) and goes on receiving.
    forced = client.subscribe(topic, "forced")
    assert call(broker, "DELETE", _sub(topic, "forced") + "?force=true")[0] == 204
    eventually(
        lambda: call(broker, "GET", _path(topic) + "/subscriptions")[1] == ["forced"],
        what="the consumer subscribed again",
    )
    _produce(client, topic, 1, start=2)
    assert _data(receive_n(forced, 1, timeout_ms=10_000)) == [b"m2"]


def test_unknown_subscriptions_and_topics_are_404(broker, client, topic):
    client.subscribe(topic, "sub").close()
    for method, suffix in (
        ("POST", "/skip_all"),
        ("POST", "/skip/1"),
        ("POST", "/resetcursor/0"),
        ("DELETE", ""),
    ):
        status, body = call(broker, method, _sub(topic, "nobody") + suffix)
        assert status == 404 and "nobody" in body["reason"], (method, suffix)
    missing = topic + "-missing"
    assert call(broker, "GET", _path(missing) + "/subscriptions")[0] == 404
    assert call(broker, "PUT", _sub(missing, "sub"))[0] == 404


def test_on_a_partitioned_topic_each_call_covers_every_partition(broker, client, topic):
    assert call(broker, "PUT", _path(topic) + "/partitions", 2)[0] == 204
    assert call(broker, "PUT", _sub(topic, "sub"))[0] == 204
    for partition in range(2):
        part = f"{topic}-partition-{partition}"
        assert call(broker, "GET", _path(part) + "/subscriptions") == (200, ["sub"])
    assert call(broker, "GET", _path(topic) + "/subscriptions") == (200, ["sub"])
    round_robin = pulsar.PartitionsRoutingMode.RoundRobinDistribution
    producer = client.create_producer(topic, batching_enabled=False, message_routing_mode=round_robin)
    for n in range(6):
        producer.send(b"m%d" % n)
    backlogs = [_backlog(broker, f"{topic}-partition-{p}", "sub") for p in range(2)]
    assert sum(backlogs) == 6 and all(backlogs), backlogs
    assert call(broker, "POST", _sub(topic, "sub") + "/skip_all")[0] == 204
    assert [_backlog(broker, f"{topic}-partition-{p}", "sub") for p in range(2)] == [0, 0]
    assert call(broker, "DELETE", _sub(topic, "sub"))[0] == 204
    assert call(broker, "GET", _path(topic) + "/subscriptions") == (200, [])
