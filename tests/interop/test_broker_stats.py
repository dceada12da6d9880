"""Pulsar's ``GET /admin/v2/broker-stats/topics``: the loaded topics' stats by namespace, bundle
and domain, with the official client's producers and subscriptions in them."""

from __future__ import annotations

import urllib.request

import pytest

from .support import admin_call as call

pytestmark = pytest.mark.interop


def bundle_of(broker, topic: str) -> str:
    domain, _, rest = topic.partition("://")
    with urllib.request.urlopen(f"{broker.http_url}/admin/v2/{domain}/{rest}/bundle", timeout=10) as answer:
        return answer.read().decode()


def test_broker_stats_lists_each_loaded_topic_under_its_namespace_bundle_and_domain(broker, client, topic):
    other = f"non-persistent://public/default/{topic.rsplit('/', 1)[1]}-np"
    producer = client.create_producer(topic, producer_name="p")
    producer.send(b"x")
    consumer = client.subscribe(other, "np-sub")
    client.create_producer(other).send(b"y")
    consumer.receive(10_000)
    status, tree = call(broker, "GET", "/admin/v2/broker-stats/topics")
    assert status == 200
    namespace = tree["public/default"]
    stats = namespace[bundle_of(broker, topic)]["persistent"][topic]
    assert [p["producerName"] for p in stats["publishers"]] == ["p"] and stats["msgInCounter"] == 1
    assert "np-sub" in namespace[bundle_of(broker, other)]["non-persistent"][other]["subscriptions"]
