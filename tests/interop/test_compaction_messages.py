"""What compaction keeps of each kind of message, sent by the official client and read back by it
with ``is_read_compacted=True``: keyless messages kept out, batches compacted message by message
with their original ids (batch indexes too), chunked messages kept whole or not at all with only
the last chunk's key deciding; and Pulsar's error for readCompacted on a Shared subscription."""

from __future__ import annotations

import os

import pulsar
import pytest

from magnetar.protocol import wire
from tests.interop.compaction_support import compact, read_all, topic_path
from tests.interop.support import RawConnection, admin_call, chunk_frame

pytestmark = pytest.mark.interop

#: The broker's largest message: a bigger one goes in chunks of this size.
SMALL = 16 * 1024


def _reader(client, topic: str):
    return client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)


def _compacted_entries(broker, topic: str) -> int:
    _, internal = admin_call(broker, "GET", topic_path(topic) + "/internalStats")
    return internal["compactedLedger"]["entries"]


def test_keyless_messages_are_kept_out_of_the_view(broker, client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"no key 1")
    producer.send(b"a1", partition_key="a")
    producer.send(b"no key 2")
    producer.send(b"b1", partition_key="b")
    producer.send(b"no key 3")  # the topic's last message
    compact(broker, topic)
    assert [(m.partition_key(), m.data()) for m in read_all(_reader(client, topic))] == [
        ("a", b"a1"),
        ("b", b"b1"),
    ]
    assert _compacted_entries(broker, topic) == 2
    assert len(read_all(client.create_reader(topic, pulsar.MessageId.earliest))) == 5  # the topic has all


def test_a_batch_is_compacted_message_by_message_and_keeps_its_ids(broker, client, topic):
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=6, batching_max_publish_delay_ms=60_000
    )
    ids: dict[bytes, str] = {}
    sent = [("a", b"a1"), ("b", b"b1"), ("c", b"c1"), ("a", b"a2"), (None, b"no key"), ("d", b"d1")]
    for key, value in sent:

        def done(result, msg_id, value=value):
            assert result == pulsar.Result.Ok
            ids[value] = str(msg_id)

        options = {} if key is None else {"partition_key": key}
        producer.send_async(value, done, **options)
    producer.flush()  # one batch of six
    plain = client.create_producer(topic, batching_enabled=False)
    plain.send(b"", partition_key="d")  # a tombstone: d1 goes
    plain.send(b"b2", partition_key="b")  # b1 goes
    compact(broker, topic)
    got = read_all(_reader(client, topic))
    assert [(m.partition_key(), m.data()) for m in got] == [("c", b"c1"), ("a", b"a2"), ("b", b"b2")]
    assert [str(m.message_id()) for m in got[:2]] == [ids[b"c1"], ids[b"a2"]]  # batch indexes 2 and 3
    assert _compacted_entries(broker, topic) == 2  # the batch, rewritten with what it keeps, and b2
    consumer = client.subscribe(  # an Exclusive consumer gets the same, and acknowledges the batch
        topic,
        "exclusive",
        consumer_type=pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
        is_read_compacted=True,
    )
    for expected in (b"c1", b"a2", b"b2"):
        message = consumer.receive(timeout_millis=5000)
        assert message.data() == expected
        consumer.acknowledge(message)


@pytest.mark.slow  # a broker of its own, with small messages
def test_chunked_messages_are_kept_whole(broker_factory, client_factory, topic):
    broker = broker_factory({"max_message_size": SMALL})
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    big = {name: os.urandom(3 * SMALL + 100) for name in ("a1", "a2", "b1")}  # four chunks each
    producer.send(big["a1"], partition_key="a")
    producer.send(big["b1"], partition_key="b")
    producer.send(big["a2"], partition_key="a")  # a1 goes, all its chunks
    producer.send(b"c1", partition_key="c")
    compact(broker, topic)
    got = read_all(_reader(client, topic))
    assert [(m.partition_key(), m.data()) for m in got] == [("b", big["b1"]), ("a", big["a2"]), ("c", b"c1")]
    assert _compacted_entries(broker, topic) == 4 + 4 + 1  # every chunk of b1 and a2, none of a1
    producer.send(b"b2", partition_key="b")  # a chunked message superseded by a small one
    compact(broker, topic)
    got = read_all(_reader(client, topic))
    assert [(m.partition_key(), m.data()) for m in got] == [("a", big["a2"]), ("c", b"c1"), ("b", b"b2")]
    assert _compacted_entries(broker, topic) == 4 + 1 + 1


@pytest.mark.slow  # a broker of its own, with small messages
def test_only_the_last_chunks_key_decides(broker_factory, client_factory, topic):
    """A chunked message whose chunks carry different keys (a raw producer writes them: the official
    one gives every chunk the message's key) counts under its last chunk's key, as Pulsar's
    compactor reads the message's metadata once it is whole."""
    broker = broker_factory({"max_message_size": SMALL})
    client = client_factory(broker.service_url)
    raw = RawConnection(broker.port)
    raw.handshake()
    name = raw.create_producer(topic)
    parts = [os.urandom(SMALL // 2) for _ in range(3)]
    for chunk_id, key in enumerate(("first", "first", "last")):
        raw.send(chunk_frame(name, 0, f"{name}-0", chunk_id, parts, key=key))
        raw.expect(wire.BaseCommand.SEND_RECEIPT)
    raw.close()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"f2", partition_key="first")  # would supersede it if the first chunk's key decided
    compact(broker, topic)
    got = read_all(_reader(client, topic))
    assert [m.data() for m in got] == [b"".join(parts), b"f2"]
    assert _compacted_entries(broker, topic) == 3 + 1
    producer.send(b"l2", partition_key="last")  # the last chunk's key: now it goes, every chunk
    compact(broker, topic)
    assert [m.data() for m in read_all(_reader(client, topic))] == [b"f2", b"l2"]
    assert _compacted_entries(broker, topic) == 2


@pytest.mark.parametrize("sub_type", [wire.CommandSubscribe.Shared, wire.CommandSubscribe.Key_Shared])
def test_read_compacted_on_a_shared_subscription_gets_pulsars_error(broker, topic, sub_type):
    """The official client refuses it itself (test_compaction.py); a client that asks gets
    Pulsar's answer: NotAllowedError and its words."""
    raw = RawConnection(broker.port)
    raw.handshake()
    raw.send_command(
        wire.CommandSubscribe(
            topic=topic, subscription="s", sub_type=sub_type, consumer_id=1, request_id=7, read_compacted=True
        )
    )
    error = raw.expect(wire.BaseCommand.ERROR).body()
    assert (error.request_id, error.error) == (7, wire.NotAllowedError)
    assert error.message == "readCompacted only allowed on failover or exclusive subscriptions"
    raw.close()
