"""A consumer of the official client (``pulsar-client`` 3.13, pulsar-client-cpp 4.2.0) with no ack
timeout, holding part of a chunked message when the broker stops (SIGTERM, or kill -9 after a
flush) or its connection is lost: it gets the message whole within seconds, and acknowledges it
(``broker/chunk_watch.py``). Before, its client refused the message sent again ("chunk id is
invalid", then "uncached chunk" for every later one) and it stayed unacknowledged, never
delivered, until the consumer's next reconnect."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import time

import pulsar
import pytest

from magnetar.protocol import wire

from ..client.proxy import ShrinkingProxy
from ..waiting import eventually
from .support import RawConnection, assert_next_is_marker, chunk_frame
from .test_chunking_faults import SMALL, consumer_out, drained

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: broker restarts

log = logging.getLogger(__name__)

#: Long enough for any bounded delivery; before the fix the message never came at all.
WITHIN_MS = 30_000


class SlowProducer:
    """A producer named "slow" writing one chunked message chunk by chunk, over a new connection
    after a restart (as the official producer sends again what has no receipt)."""

    def __init__(self, port: int, topic: str, num_chunks: int = 20) -> None:
        self.port, self.topic = port, topic
        self.parts = [os.urandom(4096) for _ in range(num_chunks)]
        self.raw: RawConnection | None = None

    @property
    def data(self) -> bytes:
        return b"".join(self.parts)

    def write(self, chunk_ids: range) -> None:
        if self.raw is None:
            self.raw = RawConnection(self.port)
            self.raw.handshake()
            self.raw.create_producer(self.topic, name="slow")
        for chunk_id in chunk_ids:
            self.raw.send(chunk_frame("slow", 0, "slow-0", chunk_id, self.parts))
            self.raw.expect(wire.BaseCommand.SEND_RECEIPT)

    def close(self) -> None:
        if self.raw is not None:
            self.raw.close()
            self.raw = None


def recorded(broker, uuid: str) -> bool:
    """The broker's flush recorded that a consumer holds part of ``uuid`` (what kill -9 keeps)."""
    path = broker.data_dir / "metadata.sqlite"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT value FROM properties WHERE key = 'chunk_contexts'").fetchall()
    return any(uuid in value for (value,) in rows)


def receive_within(consumer, expected: bytes, what: str, since: float) -> float:
    """Receive (acknowledging) until ``expected`` arrives; the seconds from ``since`` (a monotonic
    time: when the message could first be delivered) until it did."""
    while True:
        left = int(WITHIN_MS - (time.monotonic() - since) * 1000)
        try:
            msg = consumer.receive(max(left, 1))
        except pulsar.Timeout:
            raise AssertionError(f"{what}: the chunked message did not arrive in {WITHIN_MS} ms") from None
        consumer.acknowledge(msg)
        if msg.data() == expected:
            took = time.monotonic() - since
            log.info("%s: the chunked message arrived after %.3f s", what, took)
            return took


@pytest.mark.parametrize(
    ("sig", "sub_type"),
    [
        (signal.SIGTERM, pulsar.ConsumerType.Exclusive),
        (signal.SIGTERM, pulsar.ConsumerType.Shared),
        (signal.SIGKILL, pulsar.ConsumerType.Exclusive),
    ],
    ids=["sigterm", "sigterm-shared", "kill9-after-a-flush"],
)
def test_a_message_held_in_part_across_a_restart_while_its_producer_wrote_it_arrives(
    broker_factory, client_factory, topic, sig, sub_type
):
    """Its last chunk is not stored when the consumer comes back: the message goes once as usual,
    then again whole."""
    broker = broker_factory({"max_message_size": SMALL})
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub", consumer_type=sub_type, consumer_name="holder")
    slow = SlowProducer(broker.port, topic)
    slow.write(range(5))
    eventually(lambda: consumer_out(broker, topic, "sub", "holder") >= 5, what="the first chunks sent")
    if sig == signal.SIGKILL:
        eventually(lambda: recorded(broker, "slow-0"), what="a flush recording them")
    slow.close()
    broker.stop(sig)
    broker.restart()
    slow.write(range(5, 20))
    receive_within(consumer, slow.data, f"{signal.Signals(sig).name}, {sub_type}", since=time.monotonic())
    assert_next_is_marker(consumer, client.create_producer(topic, batching_enabled=False))  # once
    drained(broker, topic, "sub")


def test_a_message_held_in_part_across_a_restart_with_every_chunk_stored_arrives(
    broker_factory, client_factory, topic
):
    """The consumer ran out of permits mid-message (its application had stopped receiving): the
    message's last chunk goes first, then the message."""
    broker = broker_factory({"max_message_size": SMALL})
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub", consumer_name="holder", receiver_queue_size=20)
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    for i in range(12):
        producer.send(b"small-%d" % i)
    big = os.urandom(20 * 60 * 1024)  # 20 chunks: 8 of them fill the consumer's permits
    producer.send(big)
    eventually(
        lambda: consumer_out(broker, topic, "sub", "holder") == 20, what="12 messages and 8 chunks sent"
    )
    broker.stop(signal.SIGTERM)
    broker.restart()
    receive_within(consumer, big, "SIGTERM, every chunk stored", since=time.monotonic())
    assert_next_is_marker(consumer, producer)  # once: its client held 8 of its 20 chunks
    drained(broker, topic, "sub")


def test_a_message_held_in_part_when_the_consumers_connection_is_cut_arrives(
    broker_factory, client_factory, topic
):
    broker = broker_factory({"max_message_size": SMALL})
    with ShrinkingProxy(broker.port, shrink_by=0) as proxy:
        consumer = client_factory(proxy.service_url).subscribe(topic, "sub", consumer_name="holder")
        slow = SlowProducer(broker.port, topic)
        slow.write(range(5))
        eventually(lambda: consumer_out(broker, topic, "sub", "holder") >= 5, what="the first chunks sent")
        proxy.cut()
        slow.write(range(5, 20))
        receive_within(consumer, slow.data, "connection cut", since=time.monotonic())
        drained(broker, topic, "sub")
