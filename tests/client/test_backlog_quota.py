"""Our client against a topic past its backlog quota: refused, held or failed as Pulsar's clients."""

from __future__ import annotations

import logging
import threading

import pytest

from magnetar.client import Result
from magnetar.client.errors import ProducerBlockedQuotaExceededError, ProducerBlockedQuotaExceededException
from tests.interop.support import admin_call as call
from tests.waiting import eventually

NS = "/admin/v2/namespaces/public/default"


def _over_quota(broker_factory, magnetar_factory, topic: str, policy: str, refusal: type[Exception]):
    """Our client on a topic past a 20 KB quota of ``policy``, which refuses new producers with
    ``refusal``; with the topic's slow consumer and the producer that filled it (disconnected by
    the quota check by then)."""
    broker = broker_factory({"backlog_quota_check_interval_seconds": 0.2})
    client = magnetar_factory(broker.service_url, max_backoff_seconds=0.5)
    slow = client.subscribe(topic, "slow")
    producer = client.create_producer(topic, batching_enabled=False)
    for n in range(30):
        producer.send(b"%04d" % n + b"x" * 996)
    # the quota after the backlog: set before, a check between two sends could refuse the later ones
    assert call(broker, "POST", f"{NS}/backlogQuota", {"limitSize": 20_000, "policy": policy})[0] == 204
    path = "/admin/v2/persistent/" + topic.split("://")[1] + "/stats"
    eventually(lambda: not call(broker, "GET", path)[1]["publishers"], what="the producer disconnected")
    with pytest.raises(refusal):
        client.create_producer(topic)
    return slow, producer


def _callback():
    results, done = [], threading.Event()

    def on_sent(result, msg_id):
        results.append(result)
        done.set()

    return results, done, on_sent


def test_producer_exception_fails_waiting_sends_and_new_producers(broker_factory, magnetar_factory, topic):
    _, producer = _over_quota(
        broker_factory, magnetar_factory, topic, "producer_exception", ProducerBlockedQuotaExceededException
    )
    results, done, on_sent = _callback()
    producer.send_async(b"refused", on_sent)
    assert done.wait(10)
    assert results == [Result.ProducerBlockedQuotaExceededException]


def test_producer_request_hold_sends_once_the_backlog_drains(broker_factory, magnetar_factory, topic, caplog):
    slow, producer = _over_quota(
        broker_factory, magnetar_factory, topic, "producer_request_hold", ProducerBlockedQuotaExceededError
    )
    results, done, on_sent = _callback()
    with caplog.at_level(logging.INFO, logger="magnetar.client.handler"):
        producer.send_async(b"held", on_sent)
        eventually(lambda: producer._inner._pending, what="the send waiting in the producer")
        caplog.clear()

        def refused_again() -> bool:  # the producer tried to reconnect with the send waiting
            return any(
                "reconnect failed" in r.msg and isinstance(r.args[-1], ProducerBlockedQuotaExceededError)
                for r in caplog.records
            )

        eventually(refused_again, what="a reconnect refused while the send waits")
    assert not done.is_set()  # held: neither sent nor failed
    for _ in range(30):
        slow.acknowledge(slow.receive(5000))
    assert done.wait(30) and results == [Result.Ok]
    assert slow.receive(5000).data() == b"held"
