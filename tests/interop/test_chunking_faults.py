"""Chunked messages that never stall and are never lost, with the official client: a broker restart
while a chunked message is written, a Shared consumer that stops reading mid-message, a Key_Shared
consumer joining or leaving mid-message, and nacks and ack timeouts of chunked messages on Shared."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import threading
import time
import urllib.request
from collections import Counter

import pulsar
import pytest

from magnetar.broker.dispatchers.sticky_keys import sticky_key_hash
from magnetar.protocol import wire

from ..client.proxy import ShrinkingProxy
from ..waiting import eventually
from .support import RawConnection, chunk_frame, receive_n, stored_chunks

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: restarts and kill -9 mid-message, an ack timeout

SMALL = 64 * 1024  # the broker's limit: a 1 MB message is 17 chunks
SHARED = pulsar.ConsumerType.Shared
KEY_SHARED = pulsar.ConsumerType.KeyShared
#: With AUTO_SPLIT the first consumer holds every hash; the second takes 32768..65535.
MOVES = next(k for k in (f"k{i}" for i in range(1000)) if sticky_key_hash(k.encode()) >= 32768)
STAYS = next(k for k in (f"k{i}" for i in range(1000)) if sticky_key_hash(k.encode()) < 32768)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def backlog(broker, topic: str, sub: str) -> int:
    path = topic.replace("persistent://", "/admin/v2/persistent/")
    with urllib.request.urlopen(f"{broker.http_url}{path}/stats", timeout=10) as response:
        return json.load(response)["subscriptions"][sub]["msgBacklog"]


def drained(broker, topic: str, sub: str) -> None:
    eventually(lambda: backlog(broker, topic, sub) == 0, what=f"the backlog of {sub} draining")


def assert_each_chunk_stored_once(broker, topic: str, messages: int) -> None:
    chunks = stored_chunks(broker, topic)
    repeated = [c for c, n in Counter(chunks).items() if n > 1]
    assert not repeated, f"chunks stored twice: {repeated[:5]}"
    uuids = {u for u, _ in chunks}
    assert len(uuids) == messages
    for uuid in uuids:
        ids = [i for u, i in chunks if u == uuid]
        assert ids == list(range(len(ids))), f"{uuid} stored as {ids}"


# -- 1. a broker restart while a chunked message is written -------------------------------------------


@pytest.mark.parametrize(
    ("sig", "dedup"),
    [(signal.SIGKILL, False), (signal.SIGKILL, True), (signal.SIGTERM, False)],
    ids=["kill9", "kill9-dedup", "sigterm"],
)
def test_chunks_resent_after_a_restart_are_stored_once_and_the_messages_assemble(
    broker_factory, client_factory, topic, sig, dedup
):
    broker = broker_factory({"max_message_size": SMALL, "deduplication_enabled": dedup})
    client = client_factory(broker.service_url)
    producer = client.create_producer(
        topic, batching_enabled=False, chunking_enabled=True, send_timeout_millis=60_000
    )
    payloads = [os.urandom(4 * 1024 * 1024 + i) for i in range(10)]  # 65 chunks each
    results: list[pulsar.Result] = []
    for payload in payloads:
        producer.send_async(payload, lambda res, _msg_id: results.append(res))
    # Stop the broker while the chunks are being written: some stored, their receipts lost.
    eventually(lambda: stored_entries(broker, topic) >= 20, timeout=30, what="20 chunks stored")
    broker.stop(sig)
    assert len(results) < len(payloads), "every send finished before the restart"
    broker.restart()
    producer.flush()
    assert results == [pulsar.Result.Ok] * len(payloads)

    assert_each_chunk_stored_once(broker, topic, len(payloads))
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    got = [digest(m.data()) for m in receive_n(consumer, len(payloads), timeout_ms=20_000, ack=True)]
    assert got == [digest(p) for p in payloads]


def test_repeated_kill_9_while_producing_loses_and_repeats_no_receipted_chunked_message(
    broker_factory, client_factory, topic
):
    """Chunked messages sent without pause while the broker is killed five times: each chunk is
    stored once, so every message whose send succeeded arrives whole and once, with no
    deduplication configured."""
    broker = broker_factory({"max_message_size": SMALL})
    client = client_factory(broker.service_url)
    producer = client.create_producer(
        topic,
        batching_enabled=False,
        chunking_enabled=True,
        send_timeout_millis=120_000,
        max_pending_messages=50,
    )
    receipted: dict[int, str] = {}
    stop = threading.Event()

    def produce() -> None:
        n = 0
        while not stop.is_set():
            data = b"%06d|" % n + os.urandom(70_000 + 4_000 * (n % 80))  # 2 to 7 chunks

            def done(res, _msg_id, n=n, expected=digest(data)) -> None:  # noqa: B008 - bound now
                if res == pulsar.Result.Ok:
                    receipted[n] = expected

            producer.send_async(data, done)
            n += 1
            time.sleep(0.01)  # pacing: about a hundred sends a second, not synchronisation

    def receipts_since(before: int) -> None:
        """Until sends were receipted since ``before`` receipts: a kill now lands among them."""
        eventually(lambda: len(receipted) >= before + 20, timeout=60, what="20 more receipts")

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        for _ in range(5):
            receipts_since(len(receipted))
            broker.stop(signal.SIGKILL)
            broker.restart()
        receipts_since(len(receipted))
    finally:
        stop.set()
        thread.join(30)
    producer.flush()
    assert len(receipted) > 100

    assert_each_chunk_stored_once(broker, topic, len(receipted))
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    got = Counter()
    while True:
        try:
            msg = consumer.receive(3000)
        except pulsar.Timeout:
            break
        n = int(msg.data()[:6])
        assert receipted.get(n, digest(msg.data())) == digest(msg.data()), f"message {n} damaged"
        got[n] += 1
        consumer.acknowledge(msg)
    assert not [n for n in receipted if n not in got], "receipted messages lost"
    assert [n for n, times in got.items() if times > 1] == [], "messages stored twice"


def test_chunks_sent_again_over_a_new_connection_are_answered_with_the_stored_ones(
    broker_factory, client_factory, topic
):
    broker = broker_factory({"max_message_size": SMALL})
    with ShrinkingProxy(broker.port, shrink_by=0) as proxy:
        client = client_factory(proxy.service_url)
        producer = client.create_producer(
            topic, batching_enabled=False, chunking_enabled=True, send_timeout_millis=60_000
        )
        payload = os.urandom(2 * 1024 * 1024)  # 33 chunks
        results = []
        proxy.drop_receipts = True  # stored, but the producer never hears of it
        producer.send_async(payload, lambda res, msg_id: results.append((res, msg_id)))
        eventually(lambda: stored_entries(broker, topic) >= 10, timeout=30, what="10 chunks stored")
        proxy.drop_receipts = False
        proxy.cut()  # the producer reconnects and sends every chunk it has no receipt for again
        producer.flush()
        assert [res for res, _ in results] == [pulsar.Result.Ok]
    assert_each_chunk_stored_once(broker, topic, 1)
    consumer = client_factory(broker.service_url).subscribe(
        topic, "sub", initial_position=pulsar.InitialPosition.Earliest
    )
    (msg,) = receive_n(consumer, 1, timeout_ms=10_000)
    assert msg.data() == payload
    assert str(msg.message_id()) == str(results[0][1]), "the receipts named the chunks stored"


def stored_entries(broker, topic: str) -> int:
    path = topic.replace("persistent://", "/admin/v2/persistent/")
    try:
        with urllib.request.urlopen(f"{broker.http_url}{path}/internalStats", timeout=10) as response:
            return json.load(response)["numberOfEntries"]
    except OSError:
        return 0


# -- 2. a Shared consumer that stops reading mid-message --------------------------------------------


def test_a_shared_consumer_holding_a_chunked_message_does_not_hold_back_the_others(
    broker_factory, client_factory, topic
):
    broker = broker_factory({"max_message_size": SMALL})
    client = client_factory(broker.service_url)
    # A consumer that takes the first chunk of a message and then reads nothing more.
    stalled = RawConnection(broker.port)
    stalled.handshake()
    stalled.subscribe(topic, "shared", wire.CommandSubscribe.Shared, permits=1)
    reader = client.subscribe(topic, "shared", consumer_type=SHARED, consumer_name="reader")
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    payloads = [os.urandom(300 * 1024) if i % 2 == 0 else b"small-%d" % i for i in range(40)]
    for payload in payloads:
        producer.send_async(payload, None)
    producer.flush()

    first = stalled.expect(wire.BaseCommand.MESSAGE)
    got = [m.data() for m in receive_n(reader, len(payloads) - 1, timeout_ms=10_000, ack=True)]
    held = [p for p in payloads if p not in got]
    assert len(held) == 1, "the other consumer got every message but the stalled one's"
    assert first.command.message.message_id.entry_id == 0

    stalled.close()  # it goes: its message goes whole to the other consumer
    again = receive_n(reader, 1, timeout_ms=10_000, ack=True)
    assert [m.data() for m in again] == held
    drained(broker, topic, "shared")


# -- 3. a Key_Shared consumer joining or leaving mid-message -------------------------------------------


class Recorder:
    """Message listeners that acknowledge and record what each consumer got."""

    def __init__(self) -> None:
        self.got: dict[str, list[tuple[str, bytes]]] = {}
        self._lock = threading.Lock()

    def listener(self, name: str):
        self.got[name] = []

        def on_message(consumer, msg) -> None:
            with self._lock:
                self.got[name].append((msg.partition_key(), msg.data()))
            consumer.acknowledge(msg)

        return on_message

    def total(self) -> int:
        with self._lock:
            return sum(map(len, self.got.values()))

    def has(self, n: int) -> bool:
        """True once ``n`` messages arrived; "not yet" (with what did arrive) before."""
        assert self.total() == n, f"{self.total()} of {n} so far: {self.got}"
        return True

    def subscribe(self, client, topic: str, name: str):
        """A Key_Shared consumer ``name`` on subscription "ks" whose messages this records."""
        return client.subscribe(
            topic, "ks", consumer_type=KEY_SHARED, consumer_name=name, message_listener=self.listener(name)
        )


def consumer_out(broker, topic: str, sub: str, name: str) -> int:
    """Messages the broker sent the consumer ``name`` so far."""
    path = topic.replace("persistent://", "/admin/v2/persistent/")
    with urllib.request.urlopen(f"{broker.http_url}{path}/stats", timeout=10) as response:
        consumers = json.load(response)["subscriptions"][sub]["consumers"]
    return sum(c["msgOutCounter"] for c in consumers if c["consumerName"] == name)


class ChunkWriter:
    """A producer writing one chunked message chunk by chunk, when told to (the official producer
    writes all chunks at once)."""

    def __init__(self, broker, topic: str, key: str, num_chunks: int) -> None:
        self.raw = RawConnection(broker.port)
        self.raw.handshake()
        self.name = self.raw.create_producer(topic)
        self.key = key
        self.parts = [os.urandom(4096) for _ in range(num_chunks)]

    @property
    def data(self) -> bytes:
        return b"".join(self.parts)

    def write(self, chunk_ids: range) -> None:
        for chunk_id in chunk_ids:
            self.raw.send(chunk_frame(self.name, 0, f"{self.name}-0", chunk_id, self.parts, key=self.key))
            self.raw.expect(wire.BaseCommand.SEND_RECEIPT)


def test_a_key_shared_consumer_joining_mid_message_stalls_nothing(broker_factory, client_factory, topic):
    broker = broker_factory({"max_message_size": SMALL})
    client = client_factory(broker.service_url)
    recorder = Recorder()
    recorder.subscribe(client, topic, "first")
    big = ChunkWriter(broker, topic, MOVES, num_chunks=150)  # more than one dispatcher read of chunks
    big.write(range(3))
    eventually(lambda: consumer_out(broker, topic, "ks", "first") >= 3, what="the first chunks going out")
    # The newcomer takes MOVES' hash while "first" holds three chunks of a message of that key.
    recorder.subscribe(client, topic, "second")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(b"m%d" % i, partition_key=f"key-{i}")
    producer.send(b"after the message", partition_key=MOVES)
    big.write(range(3, 150))
    eventually(lambda: recorder.has(12), timeout=20, what="all 12 messages arriving")
    assert (MOVES, big.data) in recorder.got["first"], "whole, on the consumer of its first chunk"
    assert (MOVES, b"after the message") in recorder.got["second"], "the key moved on after it"
    drained(broker, topic, "ks")


def test_a_key_shared_consumer_leaving_mid_message_gives_it_whole_to_the_next(
    broker_factory, client_factory, topic
):
    broker = broker_factory({"max_message_size": SMALL})
    client = client_factory(broker.service_url)
    recorder = Recorder()
    leaving = recorder.subscribe(client, topic, "leaving")
    recorder.subscribe(client, topic, "staying")  # takes 32768..65535: STAYS is still the leaving consumer's
    big = ChunkWriter(broker, topic, STAYS, num_chunks=20)
    big.write(range(5))
    eventually(lambda: consumer_out(broker, topic, "ks", "leaving") >= 5, what="the first chunks going out")
    leaving.close()
    big.write(range(5, 20))
    eventually(lambda: recorder.has(1), timeout=20, what="the message arriving")
    assert recorder.got["staying"] == [(STAYS, big.data)]
    drained(broker, topic, "ks")


# -- 4. nacks and ack timeouts of chunked messages on Shared --------------------------------------------


def test_a_nacked_chunked_message_comes_back_whole(broker_factory, client_factory, topic):
    broker = broker_factory({"max_message_size": SMALL})
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "shared", consumer_type=SHARED, negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    payload = os.urandom(700 * 1024)  # 11 chunks
    producer.send(payload)
    producer.send(b"small")
    first, small = receive_n(consumer, 2, timeout_ms=10_000)
    assert first.data() == payload and small.data() == b"small"
    consumer.acknowledge(small)
    consumer.negative_acknowledge(first)
    (again,) = receive_n(consumer, 1, timeout_ms=10_000)
    assert again.data() == payload and again.redelivery_count() == 1
    consumer.acknowledge(again)
    drained(broker, topic, "shared")


def test_a_chunked_message_past_its_ack_timeout_comes_back_whole(broker_factory, client_factory, topic):
    broker = broker_factory({"max_message_size": SMALL})
    client = client_factory(broker.service_url)
    consumers = [
        client.subscribe(topic, "shared", consumer_type=SHARED, unacked_messages_timeout_ms=10_000)
        for _ in range(2)
    ]
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    payload = os.urandom(700 * 1024)
    producer.send(payload)
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:  # delivered, not acked, delivered again
        for consumer in consumers:
            with contextlib.suppress(pulsar.Timeout):
                got.append((consumer, consumer.receive(100)))
    assert [msg.data() == payload for _, msg in got] == [True, True]
    consumer, again = got[1]
    consumer.acknowledge(again)
    drained(broker, topic, "shared")
