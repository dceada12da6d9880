"""Tenants, namespaces, policies and partitioned topics through Pulsar's admin v2 paths,
used by the official client."""

from __future__ import annotations

import re
import uuid

import pulsar
import pytest

from magnetar.protocol import wire

from .support import RawConnection, assert_next_are_markers, receive_n
from .support import admin_call as call

pytestmark = pytest.mark.interop


def test_public_default_exists_from_the_start(broker):
    assert call(broker, "GET", "/admin/v2/tenants") == (200, ["public"])
    assert call(broker, "GET", "/admin/v2/namespaces/public") == (200, ["public/default"])


def test_tenant_and_namespace_lifecycle(broker):
    assert (
        call(broker, "PUT", "/admin/v2/tenants/acme", {"adminRoles": [], "allowedClusters": ["standalone"]})[
            0
        ]
        == 204
    )
    assert call(broker, "PUT", "/admin/v2/tenants/acme")[0] == 409
    assert call(broker, "PUT", "/admin/v2/namespaces/acme/prod")[0] == 204
    assert call(broker, "GET", "/admin/v2/namespaces/acme") == (200, ["acme/prod"])
    assert call(broker, "PUT", "/admin/v2/namespaces/nobody/prod")[0] == 404
    assert call(broker, "DELETE", "/admin/v2/tenants/acme")[0] == 409, "a tenant with namespaces stays"
    assert call(broker, "PUT", "/admin/v2/persistent/acme/prod/t")[0] == 204
    assert call(broker, "DELETE", "/admin/v2/namespaces/acme/prod")[0] == 409, "a namespace with topics stays"
    assert call(broker, "DELETE", "/admin/v2/persistent/acme/prod/t")[0] == 204
    assert call(broker, "DELETE", "/admin/v2/namespaces/acme/prod")[0] == 204
    assert call(broker, "DELETE", "/admin/v2/tenants/acme")[0] == 204
    assert call(broker, "GET", "/admin/v2/tenants") == (200, ["public"])


def test_policies_are_set_read_and_validated(broker):
    base = "/admin/v2/namespaces/public/default"
    assert call(broker, "POST", f"{base}/messageTTL", 120)[0] == 204
    assert call(broker, "GET", f"{base}/messageTTL") == (200, 120)
    assert call(broker, "POST", f"{base}/messageTTL", -5)[0] == 400
    assert call(broker, "POST", f"{base}/deduplication", True)[0] == 204
    assert call(broker, "GET", f"{base}/deduplication") == (200, True)
    assert (
        call(broker, "POST", f"{base}/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10})[0]
        == 204
    )
    assert call(broker, "GET", f"{base}/retention") == (
        200,
        {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10},
    )
    assert call(broker, "PUT", f"{base}/schemaCompatibilityStrategy", "FULL")[0] == 204
    assert call(broker, "GET", f"{base}/schemaCompatibilityStrategy") == (200, "FULL")
    assert call(broker, "PUT", f"{base}/schemaCompatibilityStrategy", "SOMETIMES")[0] == 400
    status, policies = call(broker, "GET", base)
    assert status == 200 and policies["message_ttl_seconds"] == 120


def test_policies_survive_a_restart(broker):
    call(broker, "PUT", "/admin/v2/tenants/t1")
    call(broker, "PUT", "/admin/v2/namespaces/t1/ns")
    call(broker, "POST", "/admin/v2/namespaces/t1/ns/messageTTL", 30)
    call(broker, "PUT", "/admin/v2/persistent/t1/ns/p/partitions", 3)
    assert broker.stop() == 0
    broker.restart(same_port=False)
    assert call(broker, "GET", "/admin/v2/namespaces/t1/ns/messageTTL") == (200, 30)
    assert call(broker, "GET", "/admin/v2/persistent/t1/ns/p/partitions") == (200, {"partitions": 3})


def test_partitioned_topic_created_over_http_is_used_by_the_official_client(broker, client, topic):
    name = topic.removeprefix("persistent://public/default/")
    path = f"/admin/v2/persistent/public/default/{name}/partitions"
    assert call(broker, "PUT", path, 3)[0] == 204
    assert call(broker, "PUT", path, 3)[0] == 409
    assert call(broker, "GET", path) == (200, {"partitions": 3})
    assert call(broker, "GET", "/admin/v2/persistent/public/default/partitioned")[1] == [topic]

    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(
        topic,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        batching_enabled=False,
    )
    for i in range(30):
        producer.send(b"%d" % i)
    messages = receive_n(consumer, 30, ack=True)
    assert sorted(int(m.data()) for m in messages) == list(range(30))
    assert {m.topic_name() for m in messages} == {f"{topic}-partition-{i}" for i in range(3)}

    # Growing is allowed, shrinking is not.
    assert call(broker, "POST", path, 4)[0] == 204
    assert call(broker, "POST", path, 2)[0] == 412


def test_auto_created_topics_follow_the_namespace_policy(broker, client, topic):
    assert (
        call(
            broker,
            "POST",
            "/admin/v2/namespaces/public/default/autoTopicCreation",
            {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2},
        )[0]
        == 204
    )
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-0", f"{topic}-partition-1"]

    call(
        broker,
        "POST",
        "/admin/v2/namespaces/public/default/autoTopicCreation",
        {"allowAutoTopicCreation": False},
    )
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(topic + "-not-there")


def test_unknown_namespace_is_a_clear_error_and_the_connection_lives(broker, client, topic):
    with pytest.raises(pulsar.PulsarException):
        client.create_producer("persistent://nobody/nothing/t")
    producer = client.create_producer(topic)
    producer.send(b"still works")


def test_regex_subscription_gets_every_matching_topic(broker, client, topic):
    base = topic.removeprefix("persistent://public/default/")
    for suffix in ("a", "b"):
        client.create_producer(f"{topic}-{suffix}").send(suffix.encode())
    client.create_producer(f"{topic}x-unrelated").send(b"no")
    consumer = client.subscribe(
        re.compile(f"persistent://public/default/{base}-.*"),
        "regex-sub",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    assert {m.data() for m in receive_n(consumer, 2, ack=True)} == {b"a", b"b"}
    # the unrelated topic has no subscription of the consumer's, so its message cannot come; and the
    # next on each matching topic is a marker (a message twice would come first)
    status, stats = call(broker, "GET", f"/admin/v2/persistent/public/default/{base}x-unrelated/stats")
    assert status == 200 and "regex-sub" not in stats["subscriptions"], stats
    assert_next_are_markers(
        consumer, {f"marker-{s}".encode(): client.create_producer(f"{topic}-{s}") for s in ("a", "b")}
    )


def test_topics_of_namespace_lists_new_topics_and_partitions_and_reports_changes(broker, client, topic):
    """What a regex consumer polls (the official Python client polls only every 60 s, as its
    pattern_auto_discovery_period argument is not passed on, so this drives the command itself)."""
    call(broker, "PUT", f"/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}-p/partitions", 2)
    client.create_producer(f"{topic}-a").send(b"a")
    raw = RawConnection(broker.port)
    try:
        raw.handshake()
        raw.send_command(wire.CommandGetTopicsOfNamespace(request_id=1, namespace="public/default"))
        first = raw.expect(wire.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE).body()
        assert {f"{topic}-a", f"{topic}-p-partition-0", f"{topic}-p-partition-1"} <= set(first.topics)
        assert not first.filtered

        raw.send_command(
            wire.CommandGetTopicsOfNamespace(
                request_id=2, namespace="public/default", topics_hash=first.topics_hash
            )
        )
        same = raw.expect(wire.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE).body()
        assert not same.changed and list(same.topics) == []

        client.create_producer(f"{topic}-b").send(b"b")
        raw.send_command(
            wire.CommandGetTopicsOfNamespace(
                request_id=3, namespace="public/default", topics_hash=first.topics_hash
            )
        )
        changed = raw.expect(wire.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE).body()
        assert changed.changed and f"{topic}-b" in changed.topics

        raw.send_command(wire.CommandGetTopicsOfNamespace(request_id=4, namespace="nobody/nothing"))
        error = raw.expect(wire.BaseCommand.ERROR).body()
        assert error.request_id == 4 and error.error == wire.TopicNotFound
    finally:
        raw.close()


def test_topics_of_namespace_with_a_pattern_lists_the_matching_topics_only(broker, client, topic):
    """Broker-side pattern evaluation (Pulsar's enableBrokerSideSubscriptionPatternEvaluation): a
    regex subscription's poll gets the matching topics (``filtered``), hashed as listed; a pattern
    longer than subscription_pattern_max_length (50), or no regex, gets the whole list."""
    base = f"pat{uuid.uuid4().hex[:6]}"  # a pattern of 50 characters at most, the domain included
    call(broker, "PUT", f"/admin/v2/persistent/public/default/{base}-p/partitions", 2)
    for name in (f"{base}-a", f"{base}x-other"):
        client.create_producer(name).send(b"x")
    wanted = {
        f"persistent://public/default/{base}-a",
        f"persistent://public/default/{base}-p-partition-0",
        f"persistent://public/default/{base}-p-partition-1",
    }
    raw = RawConnection(broker.port)
    try:
        raw.handshake()

        def ask(request_id: int, pattern: str, topics_hash: str | None = None):
            command = wire.CommandGetTopicsOfNamespace(
                request_id=request_id, namespace="public/default", topics_pattern=pattern
            )
            if topics_hash is not None:
                command.topics_hash = topics_hash
            raw.send_command(command)
            return raw.expect(wire.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE).body()

        first = ask(1, f"persistent://public/default/{base}-.*")
        assert first.filtered and set(first.topics) == wanted
        same = ask(2, f"persistent://public/default/{base}-.*", first.topics_hash)
        assert not same.changed and list(same.topics) == []
        client.create_producer(f"{base}x-another").send(b"x")  # no match: the hash stays
        assert not ask(3, f"persistent://public/default/{base}-.*", first.topics_hash).changed
        client.create_producer(f"{base}-b").send(b"x")
        changed = ask(4, f"persistent://public/default/{base}-.*", first.topics_hash)
        assert changed.changed and set(changed.topics) == {*wanted, f"persistent://public/default/{base}-b"}

        long_pattern = f"persistent://public/default/{base}-(a|b|c|d|e|f|g|h|i|j).*"
        assert len(long_pattern) > 50
        whole = ask(5, long_pattern)
        assert not whole.filtered and f"persistent://public/default/{base}x-other" in whole.topics
        unreadable = ask(6, "persistent://public/default/(")
        assert not unreadable.filtered and f"persistent://public/default/{base}x-other" in unreadable.topics
    finally:
        raw.close()
