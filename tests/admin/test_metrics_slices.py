"""``/metrics`` with many topics loaded reads them a slice at a time and makes the page off the
loop (issue 40: 100,000 topics read at once held the loop for seconds); with topic-level metrics
off the series are one per namespace, whatever the number of topics."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.admin import metrics
from magnetar.broker.topic_slices import READ_SLICE as SLICE
from magnetar.broker.traffic import Traffic
from magnetar.protocol.topic_name import TopicName

#: The topics whose values were read, in order.
READ: list[str] = []


@dataclass
class Topic:  # what /metrics reads of a non-persistent topic
    name: TopicName
    producers: dict = field(default_factory=dict)
    subscriptions: dict = field(default_factory=dict)
    replication_cursors: dict = field(default_factory=dict)
    ml: None = None

    @property
    def traffic(self) -> Traffic:
        READ.append(str(self.name))
        return Traffic()


def service(count: int, per_topic: bool) -> SimpleNamespace:
    topics = {}
    for i in range(count):
        name = TopicName.parse(f"non-persistent://public/ns{i % 2}/t{i}")
        topics[str(name)] = Topic(name, producers={1: object()} if i % 3 == 0 else {})
    config = SimpleNamespace(cluster_name="standalone", expose_topic_level_metrics_in_prometheus=per_topic)
    spread = SimpleNamespace(topics=set(), followers={})  # one process: no topic spread over workers
    return SimpleNamespace(topics=topics, config=config, spread=spread)


def test_the_topics_are_read_a_slice_at_a_time():
    broker = service(2 * SLICE + 1, per_topic=True)
    READ.clear()

    async def scenario() -> tuple[int, set[str]]:
        reading = asyncio.create_task(metrics.read_topics(broker))
        await asyncio.sleep(0)  # the reading task starts, and lets this one run after a slice
        read_meanwhile = set(READ)
        return len((await reading).rows), read_meanwhile

    rows, read_meanwhile = asyncio.run(scenario())
    assert rows == 2 * SLICE + 1 and len(read_meanwhile) == SLICE


def test_a_topic_unloaded_during_a_scrape_is_left_out_and_one_per_namespace_when_topic_level_is_off():
    broker = service(SLICE + 2, per_topic=False)

    async def scenario() -> bytes:
        reading = asyncio.create_task(metrics.read_topics(broker))
        await asyncio.sleep(0)  # the first slice is read
        broker.topics.pop(f"non-persistent://public/ns1/t{SLICE + 1}")
        return generate_latest(metrics.registry_of([], await reading))

    families = {f.name: f for f in text_string_to_metric_families(asyncio.run(scenario()).decode())}
    producers = {s.labels["namespace"]: s.value for s in families["pulsar_producers_count"].samples}
    assert producers == {
        "public/ns0": sum(1 for i in range(0, SLICE + 2, 2) if i % 3 == 0),
        "public/ns1": sum(1 for i in range(1, SLICE + 1, 2) if i % 3 == 0),  # the last one left out
    }
    assert all("topic" not in s.labels for s in families["pulsar_producers_count"].samples)
