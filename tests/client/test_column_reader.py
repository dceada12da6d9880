"""ColumnReader.receive_columns against Reader.read_next on a real broker: the same messages,
ids, keys, properties, times and indexes, for plain, batched, chunked and compressed entries."""

from __future__ import annotations

import os

import pytest

from magnetar.client import Client, CompressionType, MessageId, Timeout, aio
from magnetar.client.columns import MessageColumns

SMALL = 64 * 1024  # a small broker limit makes chunks of a 200 KB message


def rows_of(cols: MessageColumns) -> list[tuple]:
    return [
        (
            cols.payloads[i],
            cols.message_id(i),
            cols.keys[i],
            cols.properties[i],
            cols.publish_times[i],
            cols.event_times[i],
            cols.broker_publish_times[i],
            cols.indexes[i],
        )
        for i in range(len(cols))
    ]


def row_of(msg) -> tuple:
    return (
        msg.data(),
        msg.message_id(),
        msg.partition_key(),
        msg.properties(),
        msg.publish_timestamp(),
        msg.event_timestamp(),
        msg.broker_publish_time(),
        msg.index(),
    )


async def produce(client: aio.Client, topic: str) -> int:
    """Plain, batched (with and without keys/properties), compressed and chunked messages."""
    sent = 0
    plain = await client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        await plain.send(
            b"plain-%d" % i, properties={"n": str(i)}, partition_key=f"k{i}", event_timestamp=1000 + i
        )
        sent += 1
    for compression in (CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD):
        batched = await client.create_producer(
            topic, batching_enabled=True, batching_max_messages=50, compression_type=compression
        )
        futures = [
            await batched.send_async(
                b"b-%d" % i,
                properties={"i": str(i)} if i % 2 else None,
                partition_key=f"key{i}" if i % 3 else None,
            )
            for i in range(120)
        ]
        await batched.flush()
        for f in futures:
            await f
        sent += 120
    chunked = await client.create_producer(
        topic, batching_enabled=False, chunking_enabled=True, compression_type=CompressionType.ZLIB
    )
    for k in range(2):
        await chunked.send(os.urandom(200_000 + k), properties={"big": str(k)})
        sent += 1
    await plain.send(b"after-the-chunks")
    return sent + 1


@pytest.mark.parametrize("max_messages", [1, 37, 10_000])
def test_receive_columns_equals_read_next(broker_factory, topic, max_messages):
    broker = broker_factory({"max_message_size": SMALL})

    async def main():
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            sent = await produce(client, topic)
            reader = await client.create_reader(topic, MessageId.earliest)
            expected = [row_of(await reader.read_next(5000)) for _ in range(sent)]
            columns = await client.create_column_reader(topic, MessageId.earliest)
            got: list[tuple] = []
            calls = 0
            while len(got) < sent:
                cols = await columns.receive_columns(max_messages=max_messages, timeout_millis=5000)
                assert len(cols) > 0
                got += rows_of(cols)
                calls += 1
            assert got == expected
            assert any(r[7] is not None for r in got), "the broker sends indexes"
            # an unbatched, uncompressed payload is the received frame's view, not a copy
            assert [type(r[0]) for r in got[:3]] == [memoryview] * 3
            assert all(type(r[0]) is bytes for r in got[3:-1])
            if max_messages == 10_000:
                assert calls < sent / 10, "entries come many at a time"
            with pytest.raises(Timeout):
                await columns.receive_columns(timeout_millis=300)
            with pytest.raises(TypeError):
                await columns.read_next(100)

    import asyncio

    asyncio.run(main())


def test_starts_inside_a_batch_and_resumes_after_a_reconnect(broker_factory, topic):
    """Inclusive start at a batch member: the members before it are skipped; after the
    broker drops the connection the reader resumes after the last row handed out."""
    broker = broker_factory()

    async def main():
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            producer = await client.create_producer(topic, batching_enabled=True, batching_max_messages=10)
            futures = [await producer.send_async(b"%d" % i) for i in range(40)]
            await producer.flush()
            ids = [await f for f in futures]
            reader = await client.create_column_reader(topic, ids[13], start_message_id_inclusive=True)
            first = await reader.receive_columns(max_messages=1, timeout_millis=5000)
            assert first.payloads == [b"%d" % i for i in range(13, 20)]
            assert [first.message_id(i) for i in range(len(first))] == ids[13:20]
            await reader.cnx.close()  # the broker sends everything not handed out again
            rest: list[bytes] = []
            while len(rest) < 20:
                rest += (await reader.receive_columns(timeout_millis=5000)).payloads
            assert rest == [b"%d" % i for i in range(20, 40)]

    import asyncio

    asyncio.run(main())


def test_receive_columns_reads_what_the_official_client_wrote(broker_factory, topic):
    """Cross-check: the official client's plain, LZ4-batched and chunked messages come out of
    receive_columns whole, in order, with their keys and properties."""
    import asyncio

    import pulsar

    from tests.interop.conftest import CLIENT_LOGGER

    broker = broker_factory({"max_message_size": SMALL})
    official = pulsar.Client(broker.service_url, logger=CLIENT_LOGGER)
    sent: list[tuple[bytes, str | None, dict[str, str]]] = []
    try:
        plain = official.create_producer(topic, batching_enabled=False)
        for i in range(3):
            plain.send(b"plain-%d" % i, properties={"n": str(i)}, partition_key=f"k{i}")
            sent.append((b"plain-%d" % i, f"k{i}", {"n": str(i)}))
        batched = official.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=40,
            batching_max_publish_delay_ms=50,
            compression_type=pulsar.CompressionType.LZ4,
        )
        for i in range(100):
            batched.send_async(b"b-%d" % i, None, partition_key=f"key{i}")
            sent.append((b"b-%d" % i, f"key{i}", {}))
        batched.flush()
        chunked = official.create_producer(topic, batching_enabled=False, chunking_enabled=True)
        big = os.urandom(200_000)
        chunked.send(big, properties={"big": "1"})
        sent.append((big, None, {"big": "1"}))
    finally:
        official.close()

    async def main() -> list[tuple[bytes, str | None, dict[str, str]]]:
        async with aio.Client(broker.service_url, operation_timeout_seconds=10) as client:
            columns = await client.create_column_reader(topic, MessageId.earliest)
            got: list[tuple[bytes, str | None, dict[str, str]]] = []
            while len(got) < len(sent):
                cols = await columns.receive_columns(timeout_millis=5000)
                got += [
                    (bytes(cols.payloads[i]), cols.keys[i] or None, dict(cols.properties[i]))
                    for i in range(len(cols))
                ]
            with pytest.raises(Timeout):
                await columns.receive_columns(timeout_millis=300)  # nothing more, nothing twice
            return got

    assert asyncio.run(main()) == sent


def test_the_blocking_column_reader(broker_factory, topic):
    """``Client.create_column_reader``: the same rows as the asyncio reader, whole chunked
    messages, the queue and chunk progress read from the caller's thread, and a Timeout."""
    broker = broker_factory({"max_message_size": SMALL})
    big = os.urandom(200_000)  # chunked: four chunks under a 64 KB limit
    with Client(broker.service_url, operation_timeout_seconds=10) as client:
        producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
        ids = [producer.send(b"before"), producer.send(big), producer.send(b"after")]
        reader = client.create_column_reader(topic, MessageId.earliest)
        got: list[bytes] = []
        got_ids: list[MessageId] = []
        while len(got) < 3:
            cols = reader.receive_columns(timeout_millis=5000)
            got += [bytes(p) for p in cols.payloads]
            got_ids += [cols.message_id(i) for i in range(len(cols))]
        assert got == [b"before", big, b"after"]
        assert got_ids == ids
        assert reader.queued_messages() == 0
        progress = reader.chunk_progress()
        assert progress.newest_chunk is not None and progress.newest_chunk.entry_id() == ids[1].entry_id()
        assert progress.unfinished_first_chunks == () and progress.queue_empty
        assert not reader.has_message_available()
        with pytest.raises(Timeout):
            reader.receive_columns(timeout_millis=300)
        reader.seek(MessageId.earliest)
        assert bytes(reader.receive_columns(max_messages=1, timeout_millis=5000).payloads[0]) == b"before"
        reader.close()
