"""Answers that read offloaded entries, with the official client and a real S3 protocol server
(moto) that hangs (SIGSTOP) or fails: a Shared subscription's redelivery, a peek through the admin
API, an index look-up of PIP 70 and a seek by time. While the store hangs they wait without
blocking the broker's event loop (a local topic goes on); while it is known to fail they fail at
once, without asking it again; once it is back they all answer."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pulsar
import pytest

from tests.interop.support import admin_call
from tests.interop.test_tiered_storage import (
    AT_ONCE,
    _admin,
    _all_offloaded,
    _expected,
    _produce,
    _s3_config,
)
from tests.waiting import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def _peek(broker, topic: str, subscription: str, n: int = 1) -> tuple[int, bytes]:
    """(status, body) of pulsar-admin's peek of the ``n``-th message after the mark-delete position."""
    url = broker.http_url + _admin(topic, f"/subscription/{subscription}/position/{n}")
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _metric(broker, name: str) -> float:
    text = urllib.request.urlopen(broker.http_url + "/metrics", timeout=10).read().decode()
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def _landed_after_seek(first: bytes, stamps: dict[bytes, int], at: int) -> None:
    """A seek to the publish time of message ``at`` lands on the first message whose broker time
    is at or after it: ``at``, or an earlier one the broker stamped in that same millisecond (a
    message's broker time lies between its own publish time and the next one's)."""
    expected = _expected(60)
    k = expected.index(first)
    assert k == at or (k < at and stamps[expected[k + 1]] == stamps[expected[at]]), (k, at)


def _offloaded_topic(broker_factory, client_factory, topic, tmp_path, s3, **config):
    """A broker offloading to ``s3`` at once (local copies deleted), ``topic`` with 60 messages
    offloaded, and a Shared consumer that received them all and acknowledged all but the first."""
    broker = broker_factory(
        _s3_config(
            s3,
            tmp_path,
            **AT_ONCE,
            # Only the last fetch's blocks are kept: an answer about the first ledger asks the store.
            managed_ledger_offload_read_cache_bytes=0,
            **config,
        )
    )
    client = client_factory(broker.service_url, operation_timeout_seconds=30)
    ids = _produce(client, topic, 60)
    eventually(lambda: _all_offloaded(broker, topic), what="every closed ledger offloaded, local copy gone")
    consumer = client.subscribe(
        topic,
        "shared",
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    got = [consumer.receive(20_000) for _ in range(60)]
    assert sorted(m.data() for m in got) == _expected(60)
    for message in got:
        if message.data() != _expected(1)[0]:
            consumer.acknowledge(message)
    return broker, client, consumer, ids, got


def test_while_the_store_hangs_redeliveries_peeks_index_look_ups_and_seeks_wait_without_blocking_the_loop(
    broker_factory, client_factory, topic, tmp_path, s3
):
    # A store that hangs: each request waits for the client's 30 s timeout.
    broker, client, consumer, ids, got = _offloaded_topic(
        broker_factory, client_factory, topic, tmp_path, s3, managed_ledger_offload_timeout_seconds=30.0
    )
    published = {m.data(): m.publish_timestamp() for m in got}
    seeker = client.subscribe(topic, "seeker", initial_position=pulsar.InitialPosition.Latest)
    local = topic + "-local"
    local_consumer = client.subscribe(local, "s")
    s3.pause()
    try:
        consumer.redeliver_unacknowledged_messages()  # the first message, offloaded
        with ThreadPoolExecutor(3) as pool:
            peek = pool.submit(_peek, broker, topic, "shared")
            index = pool.submit(admin_call, broker, "GET", _admin(topic, "/messageid/2"))
            seek = pool.submit(seeker.seek, published[_expected(21)[20]])
            # The broker's loop serves everything local meanwhile: a topic's round trip, the admin API.
            _produce(client, local, 5)
            assert [local_consumer.receive(10_000).data() for _ in range(5)] == _expected(5)
            status, stats = admin_call(broker, "GET", _admin(local, "/stats"))
            assert status == 200 and stats["msgInCounter"] == 5, stats
            assert not (peek.done() or index.done() or seek.done())  # they wait for the store
            s3.resume()
            # Once the store answers, so do they.
            assert peek.result(timeout=30) == (200, _expected(1)[0])
            status, found = index.result(timeout=30)
            assert status == 200, found
            assert (found["ledgerId"], found["entryId"], found["index"]) == (
                ids[2].ledger_id(),
                ids[2].entry_id(),
                2,
            )
            seek.result(timeout=30)
    finally:
        s3.resume()
    redelivered = consumer.receive(20_000)
    assert redelivered.data() == _expected(1)[0] and redelivered.redelivery_count() == 1
    _landed_after_seek(seeker.receive(20_000).data(), published, 20)


def test_while_the_store_is_known_to_fail_they_fail_at_once_and_answer_once_it_is_back(
    broker_factory, client_factory, topic, tmp_path, s3
):
    # A failed request makes reads of offloaded data fail at once for 10 s, without a request.
    broker, client, consumer, ids, got = _offloaded_topic(
        broker_factory, client_factory, topic, tmp_path, s3, managed_ledger_offload_read_retry_seconds=10.0
    )
    published = {m.data(): m.publish_timestamp() for m in got}
    seeker = client.subscribe(topic, "seeker", initial_position=pulsar.InitialPosition.Latest)
    s3.pause()
    try:
        status, body = _peek(broker, topic, "shared")  # waits for its fetch to fail (1 s)
        assert status == 503 and b"object store" in body, body
        failures = _metric(broker, "brk_ledgeroffloader_read_offload_error_total")
        assert failures >= 1
        # Known to fail now: each answer fails at once, and the store is not asked again.
        consumer.redeliver_unacknowledged_messages()
        status, body = _peek(broker, topic, "shared")
        assert status == 503 and b"cannot be read" in body, body
        status, found = admin_call(broker, "GET", _admin(topic, "/messageid/2"))
        assert status == 503 and "cannot be read" in found["reason"], found
        with pytest.raises(pulsar.PulsarException):
            seeker.seek(published[_expected(21)[20]])
        assert _metric(broker, "brk_ledgeroffloader_read_offload_error_total") == failures
    finally:
        s3.resume()
    redelivered = consumer.receive(30_000)  # the dispatcher tries again once the pause is over
    assert redelivered.data() == _expected(1)[0]

    def answers() -> tuple[int, bytes]:
        answer = _peek(broker, topic, "shared")
        assert answer[0] == 200, answer
        return answer

    assert (
        eventually(answers, timeout=30, what="the peek answered once the store is back")[1] == _expected(1)[0]
    )
    status, found = admin_call(broker, "GET", _admin(topic, "/messageid/2"))
    assert status == 200 and (found["ledgerId"], found["entryId"]) == (ids[2].ledger_id(), ids[2].entry_id())
    seeker.seek(published[_expected(21)[20]])
    _landed_after_seek(seeker.receive(20_000).data(), published, 20)


def _backlog(broker, topic: str, subscription: str) -> int:
    status, stats = admin_call(broker, "GET", _admin(topic, "/stats"))
    assert status == 200, stats
    return stats["subscriptions"][subscription]["msgBacklog"]


def test_expire_messages_and_message_ttl_search_offloaded_ledgers_without_blocking_the_loop(
    broker_factory, client_factory, topic, tmp_path, s3
):
    broker, client, consumer, _, _ = _offloaded_topic(
        broker_factory,
        client_factory,
        topic,
        tmp_path,
        s3,
        managed_ledger_offload_timeout_seconds=30.0,
        message_expiry_check_interval_seconds=0.3,
    )
    client.subscribe(topic, "by-admin", initial_position=pulsar.InitialPosition.Earliest).close()
    client.subscribe(topic, "by-ttl", initial_position=pulsar.InitialPosition.Earliest).close()
    consumer.close()

    def expired_by_admin() -> bool:  # once the messages are a second old
        status, body = admin_call(broker, "POST", _admin(topic, "/subscription/by-admin/expireMessages/1"))
        assert status == 204, body
        return _backlog(broker, topic, "by-admin") == 0

    eventually(expired_by_admin, what="expire-messages to expire the offloaded messages")
    assert _backlog(broker, topic, "by-ttl") == 60
    local = topic + "-local"
    client.subscribe(local, "idle").close()
    _produce(client, local, 5)
    s3.pause()
    try:
        assert admin_call(broker, "POST", "/admin/v2/namespaces/public/default/messageTTL", 1)[0] == 204
        # The TTL's search in the offloaded ledgers waits for the store without blocking the loop:
        # the local topic's messages expire meanwhile, and it goes on.
        eventually(lambda: _backlog(broker, local, "idle") == 0, what="the local topic's messages expired")
        local_consumer = client.subscribe(local, "s")
        _produce(client, local, 5)
        assert [local_consumer.receive(10_000).data() for _ in range(5)] == _expected(5)
    finally:
        s3.resume()
    eventually(lambda: _backlog(broker, topic, "by-ttl") == 0, timeout=30, what="offloaded messages expired")
