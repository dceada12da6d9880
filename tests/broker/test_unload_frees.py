"""An unloaded topic leaves memory at once, by reference counting: nothing it was made of is in a
reference cycle that only the collector's full passes would free (issue 40: with the broker's
collector tuned for throughput those come seldom, and 100,000 topics, most of them unloaded,
held 1.5-2.1 GB). The collector is off while the topics are unloaded; each topic used every way
a client can (a producer, each subscription type, a broadcast subscription, a reader) must be
gone, with its managed ledger, cursors, subscriptions and dispatchers, once its storage closed."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pulsar
import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.cli.standalone import Standalone
from magnetar.protocol.broadcast import BROADCAST_PROPERTY, BROADCAST_VALUE
from tests.waiting import eventually_async

TYPES = {
    "exclusive": pulsar.ConsumerType.Exclusive,
    "shared": pulsar.ConsumerType.Shared,
    "failover": pulsar.ConsumerType.Failover,
    "key-shared": pulsar.ConsumerType.KeyShared,
}


def use_every_way(url: str, topics: list[str]) -> None:
    """Each topic: a producer's messages, then a consumer of each kind that takes one, and a reader."""
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        for topic in topics:  # all there before the messages: a non-persistent topic keeps none
            consumers = [
                client.subscribe(
                    topic, name, consumer_type=kind, initial_position=pulsar.InitialPosition.Earliest
                )
                for name, kind in TYPES.items()
            ]
            consumers.append(
                client.subscribe(
                    topic,
                    "broadcast",
                    properties={BROADCAST_PROPERTY: BROADCAST_VALUE},
                    initial_position=pulsar.InitialPosition.Earliest,
                )
            )
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            producer = client.create_producer(topic, producer_name=f"p-{topic[-3:]}")
            for i in range(3):
                producer.send(f"m{i}".encode(), partition_key=f"k{i}")
            producer.close()
            for consumer in consumers:
                consumer.acknowledge(consumer.receive(10_000))  # two left: a backlog for each
                consumer.close()
            reader.read_next(10_000)
            reader.close()
    finally:
        client.close()


def parts(topic) -> dict[str, weakref.ref]:
    """Weak references to what a loaded topic is made of."""
    refs = {"topic": weakref.ref(topic)}
    if topic.ml is not None:
        refs["managed ledger"] = weakref.ref(topic.ml)
    for name, subscription in topic.subscriptions.items():
        refs[f"subscription {name}"] = weakref.ref(subscription)
        if getattr(subscription, "cursor", None) is not None:
            refs[f"cursor {name}"] = weakref.ref(subscription.cursor)
        if getattr(subscription, "dispatcher", None) is not None:
            refs[f"dispatcher {name}"] = weakref.ref(subscription.dispatcher)
    return refs


def all_freed(refs: dict[str, weakref.ref]) -> bool:
    alive = [what for what, ref in refs.items() if ref() is not None]
    assert not alive, f"still in memory: {alive}"
    return True


@pytest.mark.slow
def test_an_unloaded_topic_is_freed_without_the_collector(tmp_path):
    config = BrokerConfig.load(
        None, data_dir=tmp_path / "data", port=0, http_port=0, broker_unload_inactive_topics_seconds=0
    )
    names = [f"persistent://public/default/freed-{i:03d}" for i in range(3)]
    names.append("non-persistent://public/default/freed-np")

    async def scenario() -> None:
        standalone = Standalone(config)
        await standalone.start()
        service = standalone.broker
        try:
            await asyncio.to_thread(use_every_way, service.service_url, names)
            loaded = [service.topics[name] for name in names]
            refs = {f"{t.name} {what}": ref for t in loaded for what, ref in parts(t).items()}
            assert sum(what.endswith("dispatcher broadcast") for what in refs) == len(names) - 1
            gc.disable()
            try:
                for topic in loaded:
                    service.loader.unload(topic)
                del loaded, topic
                await eventually_async(lambda: not service.loader._closing, what="the unloads' closes")
                # (The close threads let go of their last work item just after it is done.)
                await eventually_async(
                    lambda: all_freed(refs), what="every part of the unloaded topics freed"
                )
            finally:
                gc.enable()
        finally:
            await standalone.stop()

    asyncio.run(scenario())
