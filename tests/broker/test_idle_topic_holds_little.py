"""A topic whose last producer left keeps no table for producers gone and no facts of its last
entries, and a topic with no subscription keeps no copy of its messages in the entry cache
(issue 40: 100,000 topics, each given a message by a producer that then closed); a consumer that
comes later still gets each message whole, read from the files, its metadata parsed again."""

from __future__ import annotations

import asyncio
import sys

import pulsar

from magnetar.broker.config import BrokerConfig
from magnetar.cli.standalone import Standalone

TOPIC = "persistent://public/default/idle-after-producing"


def produce(url: str) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(TOPIC)
        for i in range(3):
            producer.send(f"m{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i}")
        producer.close()
    finally:
        client.close()


def consume(url: str) -> list[tuple[bytes, dict, str]]:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(TOPIC, "later", initial_position=pulsar.InitialPosition.Earliest)
        got = []
        for _ in range(3):
            message = consumer.receive(10_000)
            got.append((message.data(), message.properties(), message.partition_key()))
            consumer.acknowledge(message)
        return got
    finally:
        client.close()


def test_the_last_producer_gone_the_topic_drops_its_tables_and_a_later_consumer_gets_every_message(tmp_path):
    config = BrokerConfig.load(None, data_dir=tmp_path / "data", port=0, http_port=0)

    async def scenario() -> tuple[int, int, int, list[tuple[bytes, dict, str]]]:
        standalone = Standalone(config)
        await standalone.start()
        service = standalone.broker
        try:
            await asyncio.to_thread(produce, service.service_url)
            topic = service.topics[TOPIC]
            sizes = (
                sys.getsizeof(topic.producers),
                len(topic.recent_entries),
                len(service.storage.entry_cache),
            )
            return (*sizes, await asyncio.to_thread(consume, service.service_url))
        finally:
            await standalone.stop()

    producers_size, recent, cached, got = asyncio.run(scenario())
    assert producers_size == sys.getsizeof({})  # emptied and cleared: no table left
    assert recent == 0
    assert cached == 0  # no cursor could read them: the messages are in the files only
    assert got == [(f"m{i}".encode(), {"i": str(i)}, f"k{i}") for i in range(3)]
