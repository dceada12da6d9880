"""Hostile SENDs, names and handshakes from a raw socket: refused for that request alone.

Each test runs a canary (an official producer and consumer on a topic of their own) beside the
raw connection: it loses nothing, and a send of it held up for 10 s fails. A batch whose count or
sizes lie must be refused with SEND_ERROR: stored, it would crash every official C++ consumer
of the topic (they read past their buffer). The official consumers here subscribe only once the
refusal is seen, from their subscription's place before the hostile SEND, so they are sent
whatever was stored, and on code that stores the batch the test fails on the receipt without a
consumer crashing pytest; for the two batches the issue names, official consumers in a process
of their own are connected while the batch is sent, and must live to receive the next message.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import uuid

import crc32c
import lz4.block
import pulsar
import pytest

from magnetar.protocol import encode_frame, wire
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.commands import wrap
from magnetar.protocol.headers import encode_headers_and_payload

from ..waiting import eventually
from .support import RawConnection, admin_call, assert_next_is_marker, receive_n, scrape

pytestmark = pytest.mark.interop

BASE = wire.BaseCommand
#: A canary send held up this long fails (the client's send timeout): a bound on a failure (a
#: healthy broker answers in milliseconds), not a measure of how long one takes.
STALL_FAILS_S = 10.0


class Canary:
    """An official producer/consumer pair on a topic of its own: sends must stay quick, nothing lost."""

    def __init__(self, client: pulsar.Client) -> None:
        topic = f"persistent://public/default/canary-{uuid.uuid4().hex[:8]}"
        self.producer = client.create_producer(
            topic, batching_enabled=False, send_timeout_millis=int(STALL_FAILS_S * 1000)
        )
        self.consumer = client.subscribe(topic, "canary")
        self.sent: list[bytes] = []

    def chirp(self, count: int = 3) -> None:
        for _ in range(count):
            payload = b"canary-%d" % len(self.sent)
            self.producer.send(payload)  # raises Timeout if held up
            self.sent.append(payload)

    def check(self) -> None:
        self.chirp()
        assert [m.data() for m in receive_n(self.consumer, len(self.sent), ack=True)] == self.sent
        assert_next_is_marker(self.consumer, self.producer)


@pytest.fixture
def canary(client) -> Canary:
    bird = Canary(client)
    bird.chirp()
    return bird


# -- hostile batches ---------------------------------------------------------------------------


def singles(n: int) -> list[tuple[wire.SingleMessageMetadata, bytes]]:
    return [(wire.SingleMessageMetadata(sequence_id=i), b"m%d" % i) for i in range(n)]


def batch_send(name: str, seq: int, count: int, payload: bytes, **meta) -> bytes:
    metadata = wire.MessageMetadata(
        producer_name=name, sequence_id=seq, publish_time=1, num_messages_in_batch=count, **meta
    )
    body = encode_headers_and_payload(metadata, payload)
    return encode_frame(
        wrap(wire.CommandSend(producer_id=1, sequence_id=seq, num_messages=max(count, 1))), body
    )


def lz4_batch(name: str, seq: int, count: int, plain: bytes, uncompressed_size: int | None = None) -> bytes:
    size = len(plain) if uncompressed_size is None else uncompressed_size
    return batch_send(
        name,
        seq,
        count,
        lz4.block.compress(plain, store_size=False),
        compression=wire.LZ4,
        uncompressed_size=size,
    )


HOSTILE = {
    "count-2^31-1": lambda name, seq: batch_send(name, seq, 2**31 - 1, encode_batch(singles(1))),
    "count-5-in-4-bytes": lambda name, seq: batch_send(name, seq, 5, b"\x00\x00\x00\x02"),
    "count-0": lambda name, seq: batch_send(name, seq, 0, b""),
    "count-over-max": lambda name, seq: batch_send(name, seq, 10_001, encode_batch(singles(10_001))),
    "bytes-after-last": lambda name, seq: batch_send(name, seq, 2, encode_batch(singles(2)) + b"tail"),
    "garbage-single-metadata": lambda name, seq: batch_send(
        name, seq, 1, struct.pack(">I", 3) + b"\xff\xff\xff"
    ),
    "payload-past-end": lambda name, seq: batch_send(name, seq, 1, encode_batch(singles(1))[:-1]),
    "lz4-count-lies": lambda name, seq: lz4_batch(name, seq, 3, encode_batch(singles(1))),
    "lz4-does-not-decode": lambda name, seq: batch_send(
        name, seq, 1, b"\xff" * 40, compression=wire.LZ4, uncompressed_size=400
    ),
    "lz4-uncompressed-size-huge": lambda name, seq: lz4_batch(name, seq, 1, encode_batch(singles(1)), 2**31),
    "batched-chunk": lambda name, seq: batch_send(
        name,
        seq,
        1,
        encode_batch(singles(1)),
        uuid="u",
        chunk_id=0,
        num_chunks_from_msg=2,
        total_chunk_msg_size=9,
    ),
}


def good_batch(name: str, seq: int) -> bytes:
    return lz4_batch(
        name,
        seq,
        2,
        encode_batch([(wire.SingleMessageMetadata(), b"raw-a"), (wire.SingleMessageMetadata(), b"raw-b")]),
    )


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_batch_is_refused_and_consumers_carry_on(broker, client, canary, topic, case):
    subscriptions = {"shared": pulsar.ConsumerType.Shared, "exclusive": pulsar.ConsumerType.Exclusive}
    for sub, kind in subscriptions.items():  # the subscriptions exist before the hostile SEND
        client.subscribe(topic, sub, consumer_type=kind).close()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before")

    raw = RawConnection(broker.port)
    try:
        raw.handshake()
        name = raw.create_producer(topic)
        raw.send(HOSTILE[case](name, 0))
        error = raw.expect(BASE.SEND_ERROR).body()
        assert (error.sequence_id, error.error) == (0, wire.NotAllowedError), error
        raw.send(good_batch(name, 1))  # the producer's connection goes on
        assert raw.expect(BASE.SEND_RECEIPT).body().sequence_id == 1
    finally:
        raw.close()
    assert scrape(broker)[("magnetar_send_refusals_total", (("reason", "NotAllowedError"),))] >= 1
    canary.chirp()

    producer.send(b"after")
    producer.send(b"marker")  # the next after the four: nothing of the hostile batch comes before it
    for sub, kind in subscriptions.items():
        consumer = client.subscribe(topic, sub, consumer_type=kind)
        got = [m.data() for m in receive_n(consumer, 5, ack=True)]
        assert got == [b"before", b"raw-a", b"raw-b", b"after", b"marker"], sub
    canary.check()


# Official consumers in a process of their own, connected while the hostile batch is sent: on code
# that stores it they die of a segmentation fault (seen: exit -11), which pytest must survive.
CONSUMERS = """
import sys, pulsar
url, topic = sys.argv[1:]
client = pulsar.Client(url)
kinds = {"shared": pulsar.ConsumerType.Shared, "exclusive": pulsar.ConsumerType.Exclusive}
consumers = {sub: client.subscribe(topic, sub, consumer_type=kind) for sub, kind in kinds.items()}
for sub, consumer in consumers.items():
    while True:
        msg = consumer.receive(20000)
        consumer.acknowledge(msg)
        print("got", sub, msg.data().decode(), flush=True)  # the C++ client logs to stdout too
        if msg.data() == b"after":
            break
client.close()
"""


@pytest.mark.parametrize("case", ["count-2^31-1", "count-5-in-4-bytes"])
def test_connected_official_consumers_survive_a_hostile_batch(broker, client, canary, topic, case):
    consumers = subprocess.Popen(
        [sys.executable, "-c", CONSUMERS, broker.service_url, topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        local = topic.rsplit("/", 1)[1]
        subs_path = f"/admin/v2/persistent/public/default/{local}/subscriptions"
        eventually(
            lambda: sorted(admin_call(broker, "GET", subs_path)[1] or []) == ["exclusive", "shared"],
            timeout=20,
            what="the consumers' subscriptions",
        )
        raw = RawConnection(broker.port)
        try:
            raw.handshake()
            name = raw.create_producer(topic)
            raw.send(HOSTILE[case](name, 0))
            assert raw.expect(BASE.SEND_ERROR).body().error == wire.NotAllowedError
        finally:
            raw.close()
        client.create_producer(topic, batching_enabled=False).send(b"after")
        out, _ = consumers.communicate(timeout=30)
        assert consumers.returncode == 0, f"the official consumers died: exit {consumers.returncode}"
        got = sorted(line for line in out.splitlines() if line.startswith("got "))
        assert got == ["got exclusive after", "got shared after"]
    finally:
        if consumers.poll() is None:
            consumers.kill()
            consumers.wait()
    canary.check()


# -- names that are not UTF-8, or absurdly long ----------------------------------------------------

MARK = "PLACEHOLDER"
NOT_UTF8 = b"bad-\xff\xfe-name"  # as long as MARK
assert len(NOT_UTF8) == len(MARK)


def poisoned(body, mark_bytes: bytes = NOT_UTF8) -> bytes:
    """The frame of ``body`` with the text MARK replaced by bytes that are not UTF-8."""
    frame = encode_frame(wrap(body))
    assert frame.count(MARK.encode()) == 1
    return frame.replace(MARK.encode(), mark_bytes)


def test_names_that_are_not_utf8_are_refused_per_request(broker, client, canary, topic):
    bad_topic = f"persistent://public/default/{MARK}"
    raw = RawConnection(broker.port)
    try:
        # A client version that is not text is not read: the handshake goes through.
        raw.send(poisoned(wire.CommandConnect(client_version=MARK, protocol_version=20)))
        raw.expect(BASE.CONNECTED)
        raw.send(poisoned(wire.CommandLookupTopic(topic=bad_topic, request_id=1)))
        reply = raw.expect(BASE.LOOKUP_RESPONSE).body()
        assert (reply.response, reply.error) == (
            wire.CommandLookupTopicResponse.Failed,
            wire.InvalidTopicName,
        )

        raw.send(poisoned(wire.CommandPartitionedTopicMetadata(topic=bad_topic, request_id=2)))
        reply = raw.expect(BASE.PARTITIONED_METADATA_RESPONSE).body()
        assert (reply.request_id, reply.error) == (2, wire.InvalidTopicName)

        refused = [
            (wire.CommandProducer(topic=bad_topic, producer_id=1, request_id=3), wire.InvalidTopicName),
            (
                wire.CommandProducer(topic=topic, producer_id=1, request_id=4, producer_name=MARK),
                wire.NotAllowedError,
            ),
            (
                wire.CommandSubscribe(
                    topic=bad_topic, subscription="s", sub_type=0, consumer_id=1, request_id=5
                ),
                wire.InvalidTopicName,
            ),
            (
                wire.CommandSubscribe(
                    topic=topic, subscription=MARK, sub_type=0, consumer_id=1, request_id=6
                ),
                wire.NotAllowedError,
            ),
            (
                wire.CommandSubscribe(
                    topic=topic, subscription="s", sub_type=0, consumer_id=1, request_id=7, consumer_name=MARK
                ),
                wire.NotAllowedError,
            ),
            (
                wire.CommandGetTopicsOfNamespace(namespace=f"public/{MARK}", request_id=8),
                wire.InvalidTopicName,
            ),
        ]
        for body, code in refused:
            raw.send(poisoned(body))
            error = raw.expect(BASE.ERROR).body()
            assert (error.request_id, error.error) == (body.request_id, code), error
        raw.send_command(wire.CommandPing())
        raw.expect(BASE.PONG)  # the connection is still in business
        assert raw.create_producer(topic, producer_id=2, request_id=9)
    finally:
        raw.close()

    # Nothing was stored under a name that cannot be read back: the topic's admin answers work.
    client.subscribe(topic, "good").close()
    status, subs = admin_call(
        broker, "GET", f"/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/subscriptions"
    )
    assert (status, subs) == (200, ["good"])
    status, _ = admin_call(
        broker, "GET", f"/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/stats"
    )
    assert status == 200
    canary.check()


@pytest.mark.slow
def test_absurdly_long_names_are_refused(broker, client_factory, canary, topic):
    huge = "x" * 100_000
    raw = RawConnection(broker.port)
    try:
        raw.handshake()
        raw.send_command(wire.CommandLookupTopic(topic=f"persistent://public/default/{huge}", request_id=1))
        reply = raw.expect(BASE.LOOKUP_RESPONSE).body()
        assert (reply.response, reply.error) == (
            wire.CommandLookupTopicResponse.Failed,
            wire.InvalidTopicName,
        )
        raw.send_command(wire.CommandProducer(topic=huge, producer_id=1, request_id=2))
        assert raw.expect(BASE.ERROR).body().error == wire.InvalidTopicName
        raw.send_command(wire.CommandProducer(topic=topic, producer_id=1, request_id=3, producer_name=huge))
        assert raw.expect(BASE.ERROR).body().error == wire.NotAllowedError
        raw.send_command(
            wire.CommandSubscribe(topic=topic, subscription=huge, sub_type=0, consumer_id=1, request_id=4)
        )
        assert raw.expect(BASE.ERROR).body().error == wire.NotAllowedError
    finally:
        raw.close()
    local = topic.rsplit("/", 1)[1]
    status, _ = admin_call(
        broker, "PUT", f"/admin/v2/persistent/public/default/{local}/subscription/{'y' * 5000}"
    )
    assert status == 400
    status, _ = admin_call(broker, "PUT", f"/admin/v2/persistent/public/default/{'z' * 5000}")
    assert status == 400
    # The official client tries the lookup again until its operation timeout: 2 s is enough.
    with pytest.raises(pulsar.PulsarException):
        client_factory(broker.service_url, 2).create_producer(f"persistent://public/default/{'w' * 5000}")
    canary.check()


def send_with_poisoned_metadata(name: str, seq: int, **fields) -> bytes:
    """A SEND whose metadata field set to MARK carries bytes that are not UTF-8 (checksum right)."""
    metadata = wire.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1, **fields)
    raw_meta = metadata.SerializeToString().replace(MARK.encode(), NOT_UTF8)
    body = struct.pack(">I", len(raw_meta)) + raw_meta + b"poison"
    data = b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(body)) + body
    return encode_frame(wrap(wire.CommandSend(producer_id=1, sequence_id=seq)), data)


POISONED_FIELDS = {
    "partition_key": {"partition_key": MARK},
    "chunk-uuid": {"uuid": MARK, "chunk_id": 0, "num_chunks_from_msg": 2, "total_chunk_msg_size": 12},
}


@pytest.mark.parametrize("case", sorted(POISONED_FIELDS))
def test_message_metadata_text_that_is_not_utf8_is_refused(broker, client, canary, topic, case):
    """A key that is not text would reach Key_Shared's hashing (and a uuid the chunk tracking)."""
    consumer = client.subscribe(topic, "keyed", consumer_type=pulsar.ConsumerType.KeyShared)
    raw = RawConnection(broker.port)
    try:
        raw.handshake()
        name = raw.create_producer(topic)
        raw.send(send_with_poisoned_metadata(name, 0, **POISONED_FIELDS[case]))
        error = raw.expect(BASE.SEND_ERROR).body()
        assert (error.sequence_id, error.error) == (0, wire.NotAllowedError), error
        raw.send_message(1, name, 1, b"raw-good")
        assert raw.expect(BASE.SEND_RECEIPT).body().sequence_id == 1
    finally:
        raw.close()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"after", partition_key="k")
    assert [m.data() for m in receive_n(consumer, 2, ack=True)] == [b"raw-good", b"after"]
    assert_next_is_marker(consumer, producer, partition_key="k")
    canary.check()


# -- protocol versions ------------------------------------------------------------------------------


# 2**31 - 1 was answered 21 before as well (min of the two); a negative version was echoed.
@pytest.mark.parametrize(("asked", "answered"), [(-1, 0), (-(2**31), 0), (2**31 - 1, 21)])
def test_connect_version_is_clamped_to_what_the_broker_speaks(broker, canary, topic, asked, answered):
    raw = RawConnection(broker.port)
    try:
        raw.send_command(wire.CommandConnect(client_version="hostile", protocol_version=asked))
        assert raw.expect(BASE.CONNECTED).body().protocol_version == answered
        name = raw.create_producer(topic)
        raw.send_message(1, name, 0, b"versioned")
        assert raw.expect(BASE.SEND_RECEIPT).body().sequence_id == 0
    finally:
        raw.close()
    canary.check()
