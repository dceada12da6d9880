"""Code written for the official client runs on ours: its option names and values take effect.

The option tables are checked without a broker in test_options.py; here a real broker shows that
what is accepted is used (a consumer subscribing at the earliest message gets the ones sent before
it), and that the listeners the asyncio client now takes are called as the official client's.
"""

from __future__ import annotations

import asyncio

import pulsar

from magnetar.client import aio
from tests.waiting import eventually_async


def produce_then_consume(client, topic: str) -> list[bytes]:
    """Written against the official client's API, official names and values only."""
    producer = client.create_producer(
        topic,
        schema=pulsar.schema.BytesSchema(),
        compression_type=pulsar.CompressionType.LZ4,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        batching_type=pulsar.BatchingType.Default,
        lazy_start_partitioned_producers=False,
    )
    for i in range(5):
        producer.send(b"m%d" % i)
    consumer = client.subscribe(
        topic,
        "ported",
        schema=pulsar.schema.BytesSchema(),
        consumer_type=pulsar.ConsumerType.Shared,
        initial_position=pulsar.InitialPosition.Earliest,
        crypto_failure_action=pulsar.ConsumerCryptoFailureAction.FAIL,
        unacked_messages_timeout_ms=None,
    )
    got = []
    for _ in range(5):
        msg = consumer.receive(5000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    producer.close()
    consumer.close()
    return got


def test_official_code_gets_the_same_messages_from_both_clients(
    broker, magnetar_client, client_factory, topic
):
    client = client_factory(broker.service_url)
    expected = [b"m%d" % i for i in range(5)]
    # Earliest (the official enum) took effect: the messages sent before subscribing arrive.
    assert produce_then_consume(client, topic + "-official") == expected
    assert produce_then_consume(magnetar_client, topic + "-ours") == expected


def test_the_asyncio_client_calls_message_and_reader_listeners_with_the_handler(broker, topic):
    async def main() -> None:
        async with aio.Client(broker.service_url, operation_timeout_seconds=10, io_threads=2) as client:
            heard: list[tuple[object, bytes]] = []
            consumer = await client.subscribe(
                topic, "sub", message_listener=lambda c, msg: heard.append((c, msg.data()))
            )
            read: list[tuple[object, bytes]] = []
            reader = await client.create_reader(
                topic, aio.MessageId.earliest, reader_listener=lambda r, msg: read.append((r, msg.data()))
            )
            producer = await client.create_producer(topic)
            for i in range(3):
                await producer.send(b"%d" % i)
            await eventually_async(lambda: len(heard) == 3 and len(read) == 3, what="both listeners")
            assert heard == [(consumer, b"0"), (consumer, b"1"), (consumer, b"2")]
            assert read == [(reader, b"0"), (reader, b"1"), (reader, b"2")]

    asyncio.run(main())
