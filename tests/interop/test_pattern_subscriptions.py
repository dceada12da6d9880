"""The official client's regex subscriptions over a namespace of many topics, and a topic that
appears later (issue 40). The official C++ client lists the namespace itself (it sends no
``topics_pattern``, so it gets the whole list) and filters it; it polls every 60 s by default,
and it has no topic-list watcher (CommandWatchTopicList), which Magnetar does not offer either
(its CONNECTED does not say ``supports_topic_watchers``, so clients that have one poll). The
Python client checks its ``pattern_auto_discovery_period`` argument but does not pass it on
(pulsar-client 3.13), so the test that waits for a poll sets the period on the configuration
the client builds, rather than waiting a minute."""

from __future__ import annotations

import re
import uuid

import _pulsar
import pulsar
import pytest

from .support import receive_n

pytestmark = pytest.mark.interop

#: Topics in the namespace, and how many of them the pattern takes.
TOPICS, MATCHING = 300, 10
#: How often the official client looks for new topics in the test that waits for a look (its
#: default is 60 s).
DISCOVERY_S = 1


def names(prefix: str) -> tuple[list[str], list[str]]:
    matching = [f"persistent://public/default/{prefix}-m-{i}" for i in range(MATCHING)]
    others = [f"persistent://public/default/{prefix}-o-{i}" for i in range(TOPICS - MATCHING)]
    return matching, others


@pytest.mark.slow
def test_a_regex_subscription_takes_the_matching_topics_of_a_namespace_of_many(broker, client):
    prefix = f"many{uuid.uuid4().hex[:6]}"
    matching, others = names(prefix)
    for name in [*matching, *others]:
        producer = client.create_producer(name)
        producer.send(name.encode())
        producer.close()
    consumer = client.subscribe(
        re.compile(f"persistent://public/default/{prefix}-m-.*"),
        "regex",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    got = {m.data().decode() for m in receive_n(consumer, MATCHING, ack=True)}
    assert got == set(matching)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(500)  # nothing of the others


def polling_every(seconds: int) -> object:
    """A ``_pulsar.ConsumerConfiguration`` factory whose configurations look for new topics every
    ``seconds``: what ``Client.subscribe(pattern_auto_discovery_period=...)`` would set if the
    Python client passed it on."""
    make = _pulsar.ConsumerConfiguration

    def configuration() -> _pulsar.ConsumerConfiguration:
        conf = make()
        conf.pattern_auto_discovery_period(seconds)
        return conf

    return configuration


@pytest.mark.slow
def test_a_regex_subscription_finds_a_topic_made_later(broker, client, monkeypatch):
    prefix = f"later{uuid.uuid4().hex[:6]}"
    first = f"persistent://public/default/{prefix}-m-first"
    client.create_producer(first).send(b"first")
    with monkeypatch.context() as patch:
        patch.setattr(_pulsar, "ConsumerConfiguration", polling_every(DISCOVERY_S))
        consumer = client.subscribe(
            re.compile(f"persistent://public/default/{prefix}-m-.*"),
            "regex",
            initial_position=pulsar.InitialPosition.Earliest,
            pattern_auto_discovery_period=DISCOVERY_S,
        )
    assert consumer.receive(10_000).data() == b"first"
    later = client.create_producer(f"persistent://public/default/{prefix}-m-later")
    later.send(b"before discovery")  # kept: the subscription starts at the earliest message
    message = consumer.receive((DISCOVERY_S + 30) * 1000)
    assert message.data() == b"before discovery"
