"""Regex subscriptions of our client: the pattern's rules, then against a broker process."""

from __future__ import annotations

import logging
import re

import pytest

from magnetar.client import AlreadyClosed, InitialPosition, InvalidConfiguration, MessageId, Timeout
from magnetar.client.errors import ConsumerBusy
from magnetar.client.pattern import matching_topics, parse_pattern
from magnetar.protocol import pulsar_wire_pb2 as wire
from tests.client.listeners import collecting_listener
from tests.interop.support import admin_call as call
from tests.waiting import eventually

NS = "persistent://public/default/"


def test_a_pattern_names_its_namespace_and_domain():
    assert parse_pattern(re.compile("orders-.*"))[:2] == (
        "public/default",
        wire.CommandGetTopicsOfNamespace.PERSISTENT,
    )
    namespace, mode, pattern = parse_pattern(
        re.compile("non-persistent://acme/iot/dev-[0-9]+", re.IGNORECASE)
    )
    assert (namespace, mode) == ("acme/iot", wire.CommandGetTopicsOfNamespace.NON_PERSISTENT)
    assert pattern.fullmatch("non-persistent://acme/iot/DEV-7") and pattern.flags & re.IGNORECASE
    for bad in ("persistent://acme", "persistent://acme/iot/", "kafka://a/b/c"):
        with pytest.raises(InvalidConfiguration):
            parse_pattern(bad)


def test_a_topic_matches_by_its_whole_name_without_the_partition_suffix():
    topics = [
        NS + "orders-a",
        NS + "orders-b-partition-0",
        NS + "orders-b-partition-1",
        NS + "other",
        NS + "xorders-c",
    ]
    _, _, pattern = parse_pattern(re.compile("orders-.*"))
    assert matching_topics(topics, pattern) == [
        (NS + "orders-a", -1),
        (NS + "orders-b-partition-0", 0),
        (NS + "orders-b-partition-1", 1),
    ]
    _, _, exact = parse_pattern(re.compile(NS + "orders-b"))
    assert [name for name, _ in matching_topics(topics, exact)] == [
        NS + "orders-b-partition-0",
        NS + "orders-b-partition-1",
    ]


@pytest.mark.slow
def test_regex_subscription_takes_matching_topics_and_finds_new_ones(broker, magnetar_client, topic):
    for suffix in ("a", "b"):
        magnetar_client.create_producer(f"{topic}-{suffix}").send(suffix.encode())
    magnetar_client.create_producer(f"{topic}x-unrelated").send(b"no")
    consumer = magnetar_client.subscribe(
        re.compile(f"{topic}-.*"),
        "regex",
        initial_position=InitialPosition.Earliest,
        pattern_auto_discovery_period=1,
    )
    first = {consumer.receive(5000).data() for _ in range(2)}
    assert first == {b"a", b"b"}
    # A partitioned topic created afterwards is found at the next discovery, every partition.
    base = topic.rsplit("/", 1)[1]
    call(broker, "PUT", f"/admin/v2/persistent/public/default/{base}-p/partitions", 2)
    later = magnetar_client.create_producer(f"{topic}-p")
    eventually(lambda: len(consumer._inner._children) >= 4, what="the partitions found")
    assert len(consumer._inner._children) == 4
    for i in range(6):
        later.send(b"p%d" % i)
    assert sorted(consumer.receive(5000).data() for _ in range(6)) == [b"p%d" % i for i in range(6)]
    # Nothing else (the unrelated topic's message): a later message is the next one received.
    magnetar_client.create_producer(f"{topic}-a").send(b"later")
    assert consumer.receive(5000).data() == b"later"


@pytest.mark.slow
def test_a_listener_also_gets_the_topics_found_later(magnetar_client, topic):
    seen, got_both, listener = collecting_listener(2, ack=False)
    magnetar_client.create_producer(f"{topic}-first").send(b"first")
    magnetar_client.subscribe(
        re.compile(f"{topic}-.*"),
        "regex",
        initial_position=InitialPosition.Earliest,
        pattern_auto_discovery_period=1,
        message_listener=listener,
    )
    magnetar_client.create_producer(f"{topic}-second").send(b"second")
    assert got_both.wait(10)
    assert sorted(seen) == [b"first", b"second"]


def test_a_pattern_with_no_topic_yet_waits_and_a_zero_queue_is_refused(magnetar_client, topic):
    consumer = magnetar_client.subscribe(
        re.compile(f"{topic}-none-.*"), "regex", pattern_auto_discovery_period=1
    )
    with pytest.raises(Timeout):
        consumer.receive(200)
    with pytest.raises(AlreadyClosed):  # no topic's consumer to take it: an error, not a stray ack
        consumer.acknowledge(MessageId(-1, 7, 0))
    with pytest.raises(InvalidConfiguration):
        magnetar_client.subscribe(re.compile(f"{topic}-.*"), "zq", receiver_queue_size=0)


@pytest.mark.slow
def test_a_topic_that_cannot_be_subscribed_yet_is_tried_again(magnetar_client, topic, caplog):
    magnetar_client.create_producer(f"{topic}-a").send(b"a")
    holder = magnetar_client.subscribe(f"{topic}-b", "regex")  # Exclusive: the pattern is refused b
    with pytest.raises(ConsumerBusy):  # and so the whole subscribe, as for a list of topics
        magnetar_client.subscribe(
            re.compile(f"{topic}-[ab]"), "regex", initial_position=InitialPosition.Earliest
        )
    holder.close()
    consumer = magnetar_client.subscribe(
        re.compile(f"{topic}-[ac]"),
        "regex",
        initial_position=InitialPosition.Earliest,
        pattern_auto_discovery_period=2,
    )
    # Exclusive on a again: the failed subscribe's consumer of a was let go.
    assert consumer.receive(5000).data() == b"a"
    with caplog.at_level(logging.WARNING, logger="magnetar.client.pattern"):
        holder = magnetar_client.subscribe(f"{topic}-c", "regex")  # before the next discovery finds c

        def refused_c() -> bool:  # the discovery's failure, logged by the client's loop thread
            return any(
                "topic discovery failed" in r.getMessage() and isinstance(r.args[-1], ConsumerBusy)
                for r in caplog.records
            )

        eventually(refused_c, what="a discovery finding c and refused it")
    holder.close()
    magnetar_client.create_producer(f"{topic}-c").send(b"c")
    assert consumer.receive(8000).data() == b"c"  # a later discovery tried again
