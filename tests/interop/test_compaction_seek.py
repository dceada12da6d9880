"""Seek by message id and by time on a compacted read (a reader with ``is_read_compacted=True``, an
Exclusive consumer reading compacted), with the official client: the seek lands in the compacted
view where the position is up to the horizon, so what follows is the view from there, then the
topic after the horizon, also where the ledgers the view came from were deleted since."""

from __future__ import annotations

import time

import pulsar
import pytest

from tests.interop.compaction_support import compact, read_all, topic_path
from tests.interop.support import admin_call, receive_n
from tests.waiting import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: a broker, a compaction, several seeks each

#: Small ledgers, deleted as soon as nothing holds them: the view outlives its ledgers.
TRIMMED = {"max_ledger_size_bytes": 300, "retention_check_interval_seconds": 0.1}


def _history(client, topic: str) -> tuple[list, int]:
    """20 messages over 4 keys (then compacted to v16..v19) and a time between v17 and v18."""
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    for i in range(20):
        ids.append(producer.send(f"v{i}".encode(), partition_key=f"k{i % 4}"))
        if i == 17:  # a time between v17's and v18's, in milliseconds: the pauses are the behaviour
            time.sleep(0.05)
            middle = int(time.time() * 1000)
            time.sleep(0.05)
    producer.close()
    return ids, middle


def _after_horizon(client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"v20", partition_key="k0")
    producer.send(b"v21", partition_key="k1")
    producer.close()


def _holder(client, topic: str):
    """A subscription that holds every ledger until compaction has read them (then it goes)."""
    return client.subscribe(topic, "holder", initial_position=pulsar.InitialPosition.Earliest)


def _trimmed(broker, topic: str, ids: list) -> None:
    """Wait until the ledgers of ``ids`` are deleted: only the compacted view has them."""

    def gone():
        _, internal = admin_call(broker, "GET", topic_path(topic) + "/internalStats")
        return not {ledger["ledgerId"] for ledger in internal["ledgers"]} & {i.ledger_id() for i in ids}

    eventually(gone, what="the compacted ledgers to be trimmed")


def _prepare(broker, client, topic: str, trimmed: bool) -> tuple[list, int]:
    holder = _holder(client, topic)
    ids, middle = _history(client, topic)
    compact(broker, topic)
    _after_horizon(client, topic)
    holder.unsubscribe()
    if trimmed:
        _trimmed(broker, topic, ids)
    return ids, middle


EVERYTHING = [b"v16", b"v17", b"v18", b"v19", b"v20", b"v21"]


@pytest.mark.parametrize("trimmed", [False, True], ids=["ledgers-kept", "ledgers-trimmed"])
def test_a_compacted_reader_seeks_by_id_and_by_time(broker_factory, client_factory, topic, trimmed):
    broker = broker_factory(TRIMMED if trimmed else None)
    client = client_factory(broker.service_url)
    ids, middle = _prepare(broker, client, topic, trimmed)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert [m.data() for m in read_all(reader)] == EVERYTHING
    reader.seek(ids[17])  # the C++ client's seek is exclusive of the given message
    assert [m.data() for m in read_all(reader)] == [b"v18", b"v19", b"v20", b"v21"]
    reader.seek(pulsar.MessageId.earliest)
    assert [m.data() for m in read_all(reader)] == EVERYTHING
    reader.seek(middle)
    assert [m.data() for m in read_all(reader)] == [b"v18", b"v19", b"v20", b"v21"]
    reader.seek(0)  # before everything
    assert [m.data() for m in read_all(reader)] == EVERYTHING


@pytest.mark.parametrize("trimmed", [False, True], ids=["ledgers-kept", "ledgers-trimmed"])
def test_a_compacted_exclusive_consumer_seeks_by_id_and_by_time(
    broker_factory, client_factory, topic, trimmed
):
    broker = broker_factory(TRIMMED if trimmed else None)
    client = client_factory(broker.service_url)
    ids, middle = _prepare(broker, client, topic, trimmed)
    consumer = client.subscribe(
        topic,
        "compacted",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
        is_read_compacted=True,
    )
    assert [m.data() for m in receive_n(consumer, 6, ack=True)] == EVERYTHING
    consumer.seek(ids[17])
    assert [m.data() for m in receive_n(consumer, 4, ack=True)] == [b"v18", b"v19", b"v20", b"v21"]
    consumer.seek(middle)
    assert [m.data() for m in receive_n(consumer, 4, ack=True)] == [b"v18", b"v19", b"v20", b"v21"]
    consumer.seek(pulsar.MessageId.earliest)
    assert [m.data() for m in receive_n(consumer, 6, ack=True)] == EVERYTHING
    consumer.seek(0)
    assert [m.data() for m in receive_n(consumer, 6, ack=True)] == EVERYTHING


def test_a_view_of_many_reads_is_read_whole_after_its_ledgers_were_trimmed(
    broker_factory, client_factory, topic
):
    """A view longer than one dispatch read (100 entries), from ledgers deleted since, by a reader
    and by a new Exclusive subscription at the earliest message."""
    broker = broker_factory(TRIMMED)
    client = client_factory(broker.service_url)
    holder = _holder(client, topic)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"v{i}".encode(), partition_key=f"k{i % 250}") for i in range(500)]
    compact(broker, topic)
    producer.send(b"after", partition_key="k0")
    holder.unsubscribe()
    _trimmed(broker, topic, ids)
    expected = [f"v{i}".encode() for i in range(250, 500)] + [b"after"]
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert [m.data() for m in read_all(reader)] == expected
    consumer = client.subscribe(
        topic,
        "new",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
        is_read_compacted=True,
    )
    assert [m.data() for m in receive_n(consumer, len(expected), ack=True)] == expected
