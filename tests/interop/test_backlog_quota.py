"""Backlog quotas with the official client: producers held or refused past a size limit, and
the oldest messages evicted past a size or an age limit."""

from __future__ import annotations

import pulsar
import pytest
from pulsar.exceptions import ProducerBlockedQuotaExceededError, ProducerBlockedQuotaExceededException

from ..waiting import eventually
from .support import admin_call as call
from .support import receive_n

pytestmark = pytest.mark.interop

NS = "/admin/v2/namespaces/public/default"
CHECK = {"backlog_quota_check_interval_seconds": 0.2}


def _stats(broker, topic: str) -> dict:
    return call(broker, "GET", "/admin/v2/persistent/" + topic.split("://")[1] + "/stats")[1]


def _fill(client, topic: str, count: int, size: int = 1000) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for n in range(count):
        producer.send(b"%04d" % n + b"x" * (size - 4))
    producer.close()


def test_quotas_are_set_read_and_removed_per_kind(broker):
    assert call(broker, "GET", f"{NS}/backlogQuotaMap") == (200, {})
    quota = {"limitSize": 1000, "limitTime": -1, "policy": "producer_exception"}
    assert call(broker, "POST", f"{NS}/backlogQuota", quota)[0] == 204  # destination_storage by default
    age = {"limitSize": -1, "limitTime": 60, "policy": "consumer_backlog_eviction"}
    assert call(broker, "POST", f"{NS}/backlogQuota?backlogQuotaType=message_age", age)[0] == 204
    assert call(broker, "GET", f"{NS}/backlogQuotaMap") == (
        200,
        {"destination_storage": quota, "message_age": age},
    )
    assert call(broker, "POST", f"{NS}/backlogQuota", {"limitSize": 1, "policy": "drop"})[0] == 400
    assert call(broker, "POST", f"{NS}/backlogQuota?backlogQuotaType=weight", quota)[0] == 400
    assert call(broker, "DELETE", f"{NS}/backlogQuota?backlogQuotaType=message_age")[0] == 204
    assert call(broker, "GET", f"{NS}/backlogQuotaMap") == (200, {"destination_storage": quota})


def test_producer_exception_refuses_producers_until_the_backlog_drains(broker_factory, client_factory, topic):
    broker = broker_factory(CHECK)
    client = client_factory(broker.service_url)
    quota = {"limitSize": 20_000, "policy": "producer_exception"}
    assert call(broker, "POST", f"{NS}/backlogQuota", quota)[0] == 204
    producer = client.create_producer(topic, batching_enabled=False)
    for n in range(30):  # ~30 KB, no backlog yet: no subscription
        producer.send(b"%04d" % n + b"x" * 996)
    slow = client.subscribe(topic, "slow", initial_position=pulsar.InitialPosition.Earliest)  # ~30 KB behind
    # The quota check disconnects the producer, and the broker refuses it from then on.
    eventually(lambda: _stats(broker, topic)["publishers"] == [], what="the producer disconnected")
    with pytest.raises(ProducerBlockedQuotaExceededException):
        client.create_producer(topic)
    for message in receive_n(slow, 30):
        slow.acknowledge(message)
    eventually(lambda: _stats(broker, topic)["subscriptions"]["slow"]["msgBacklog"] == 0, what="the acks")
    client.create_producer(topic).send(b"after")  # within the quota again
    assert receive_n(slow, 1)[0].data() == b"after"


def test_producer_request_hold_holds_sends_until_the_backlog_drains(broker_factory, client_factory, topic):
    broker = broker_factory({**CHECK, "backlog_quota_default_limit_bytes": 20_000})  # hold is the default
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
    for n in range(30):  # ~30 KB, no backlog yet: no subscription
        producer.send(b"%04d" % n + b"x" * 996)
    slow = client.subscribe(topic, "slow", initial_position=pulsar.InitialPosition.Earliest)  # ~30 KB behind
    eventually(lambda: _stats(broker, topic)["publishers"] == [], what="the producer disconnected")
    with pytest.raises(ProducerBlockedQuotaExceededError):
        client.create_producer(topic)
    held = []
    producer.send_async(b"held", lambda result, msg_id: held.append(result))
    # Still past the quota (nothing was acknowledged): the topic refuses producers, so the send
    # waits in the client; a client that failed it instead would call back with an error, and
    # the held == [Ok] below would fail.
    with pytest.raises(ProducerBlockedQuotaExceededError):
        client.create_producer(topic)
    stats = _stats(broker, topic)
    assert stats["publishers"] == [] and stats["msgInCounter"] == 30, "the held message was stored"
    for message in receive_n(slow, 30):
        slow.acknowledge(message)
    assert receive_n(slow, 1, timeout_ms=30_000)[0].data() == b"held"
    assert held == [pulsar.Result.Ok]


def test_consumer_backlog_eviction_by_size_drops_the_oldest_for_the_slowest(
    broker_factory, client_factory, topic
):
    broker = broker_factory(CHECK)
    client = client_factory(broker.service_url)
    quota = {"limitSize": 10_000, "policy": "consumer_backlog_eviction"}
    assert call(broker, "POST", f"{NS}/backlogQuota", quota)[0] == 204
    client.subscribe(topic, "slow").close()
    keeping_up = client.subscribe(topic, "keeping-up")
    _fill(client, topic, 30)  # ~30 KB
    for message in receive_n(keeping_up, 30):
        keeping_up.acknowledge(message)
    # A quota check may run in the middle of the fill and evict part of it; the next one, after
    # the fill, brings the backlog under the limit: wait for that one.
    eventually(
        lambda: _stats(broker, topic)["subscriptions"]["slow"]["msgBacklog"] <= 10, what="the eviction"
    )
    left = _stats(broker, topic)["subscriptions"]["slow"]["msgBacklog"]
    assert 5 <= left <= 10  # ~10 KB of 1 KB messages (records are a little bigger than their payloads)
    slow = client.subscribe(topic, "slow")
    got = [int(m.data()[:4]) for m in receive_n(slow, left, ack=True)]
    assert got == list(range(30 - left, 30))  # the newest ones, in order
    client.create_producer(topic).send(b"more")  # producers are not held under eviction
    # The next message: an evicted one coming back after all would come before it.
    assert receive_n(slow, 1)[0].data() == b"more"


@pytest.mark.slow
def test_consumer_backlog_eviction_by_age_drops_what_is_older(broker_factory, client_factory, topic):
    broker = broker_factory(CHECK)
    client = client_factory(broker.service_url)
    quota = {"limitTime": 2, "policy": "consumer_backlog_eviction"}
    assert call(broker, "POST", f"{NS}/backlogQuota?backlogQuotaType=message_age", quota)[0] == 204
    client.subscribe(topic, "slow").close()
    _fill(client, topic, 3, size=100)
    eventually(lambda: _stats(broker, topic)["subscriptions"]["slow"]["msgBacklog"] == 0, what="the eviction")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"new")
    slow = client.subscribe(topic, "slow")
    assert receive_n(slow, 1)[0].data() == b"new"
