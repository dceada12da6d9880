"""The spread's stored cursor and faults, with the official client against ``--workers 2``: the
subscription's stored cursor waits for the slowest consumer of either worker (and a restart
resumes there); a worker killed with -9 in the middle of traffic, whose broadcast consumers
reconnect (to either worker) and miss nothing, while what they acknowledged and was written
before the kill does not come back."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading

import pulsar
import pytest

from magnetar.protocol import wire
from magnetar.protocol.broadcast import BROADCAST_PROPERTY, BROADCAST_VALUE
from magnetar.storage.position import Position
from magnetar.storage.virtual_cursor_buckets import decode_bucket
from magnetar.storage.virtual_cursors import decode_state

from ..waiting import eventually
from .support import RawConnection, receive_n
from .test_broadcast import BROADCAST
from .test_broadcast_spread import _owner_of, own_ports, owner_stats, served, spread_topic
from .test_workers import WORKERS
from .test_workers_faults import SERVING, Sending, worker_pids

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: many clients, restarts, kill -9
T = wire.BaseCommand


def place(msg: pulsar.Message) -> Position:
    msg_id = msg.message_id()
    return Position(msg_id.ledger_id(), msg_id.entry_id())


def on_both_workers(broker, client_factory, topic: str, first, **client_options) -> tuple[dict, set[str]]:
    """Broadcast consumers of ``topic`` ("fans"), each on a client of its own, until some are at
    the owner and some elsewhere; the consumers by name, and the names of those at the owner."""
    consumers = {"first": first}
    while True:
        at_owner, elsewhere = served(broker, topic, "fans")
        if elsewhere and len(at_owner) > 1:
            return consumers, at_owner
        assert len(consumers) < 40, (at_owner, elsewhere)
        name = f"vehicle-{len(consumers)}"
        client = client_factory(broker.service_url, **client_options)
        consumers[name] = client.subscribe(
            topic,
            "fans",
            consumer_type=pulsar.ConsumerType.Exclusive,
            consumer_name=name,
            properties=BROADCAST,
        )


def backlog(broker, topic: str) -> int:
    return owner_stats(broker, topic)["subscriptions"]["fans"]["msgBacklog"]


def test_the_stored_cursor_waits_for_the_slowest_consumer_of_either_worker(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    topic, first = spread_topic(broker, client_factory)
    consumers, at_owner = on_both_workers(broker, client_factory, topic, first)
    elsewhere = sorted(set(consumers) - at_owner)
    producer = client_factory(broker.service_url).create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"m-{i}".encode())
    received = {name: receive_n(c, 10) for name, c in consumers.items()}
    for slow in (elsewhere[0], sorted(at_owner)[0]):  # the slowest on the other worker, then at the owner
        for name, consumer in consumers.items():
            for msg in received[name][: 3 if name == slow else 10]:
                consumer.acknowledge(msg)
        eventually(lambda: backlog(broker, topic) == 7, what=f"the stored cursor at {slow}'s place")
        consumers[slow].acknowledge_cumulative(received[slow][9])
        eventually(lambda: backlog(broker, topic) == 0, what="the stored cursor past everything")
        for i in range(10):
            producer.send(f"n-{i}".encode())
        received = {name: receive_n(c, 10) for name, c in consumers.items()}
    # Held by a consumer of the other worker, the stored cursor survives a restart there.
    for name, consumer in consumers.items():
        for msg in received[name][: 4 if name == elsewhere[0] else 10]:
            consumer.acknowledge(msg)
    eventually(lambda: backlog(broker, topic) == 6, what=f"the stored cursor at {elsewhere[0]}'s place")
    flushes = owner_stats(broker, topic)["subscriptions"]["fans"]["ackState"]["flushes"]
    eventually(lambda: owner_stats(broker, topic)["subscriptions"]["fans"]["ackState"]["flushes"] > flushes)
    broker.stop()  # SIGTERM: every worker flushes
    broker.restart()
    assert backlog(broker, topic) == 6


def stored_places(broker, subscription: str = "fans") -> dict[str, Position]:
    """Every worker's stored virtual cursors of ``subscription``: the most advanced per name."""
    db = sqlite3.connect(f"file:{broker.data_dir / 'metadata.sqlite'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT data FROM place_pages WHERE cursor = ? OR (cursor >= ? AND cursor < ?)",
            (subscription, subscription + "\x00", subscription + "\x01"),
        ).fetchall()
    finally:
        db.close()
    places: dict[str, Position] = {}
    for (data,) in rows:
        for name, state in decode_bucket(data).items():
            mark = decode_state(state).mark_delete
            places[name] = max(places.get(name, mark), mark)
    return places


class Receiving:
    """A consumer receiving and acknowledging on a thread of its own, keeping what came in order."""

    def __init__(self, consumer) -> None:
        self.consumer = consumer
        self.got: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self.consumer.receive(200)
            except pulsar.Timeout:
                continue
            self.got.append(msg.data())
            self.consumer.acknowledge(msg)

    def missing(self, payloads: list[bytes]) -> int:
        return len(set(payloads) - set(self.got))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.mark.parametrize("victim", ["follower", "owner"])
def test_a_worker_killed_mid_traffic_loses_nothing_of_its_broadcast_consumers(
    broker_factory, client_factory, victim: str
):
    broker = broker_factory(WORKERS)
    topic, first = spread_topic(broker, client_factory, "kill")
    consumers, at_owner = on_both_workers(broker, client_factory, topic, first, operation_timeout_seconds=30)
    producer = client_factory(broker.service_url, operation_timeout_seconds=30).create_producer(
        topic, batching_enabled=False
    )
    for i in range(20):
        producer.send(f"acked-{i}".encode())
    last = {name: receive_n(c, 20, ack=True)[-1] for name, c in consumers.items()}
    # Every consumer's place, wherever it is served, written with its acknowledgements.
    eventually(
        lambda: all(stored_places(broker).get(n, Position(-1, -1)) >= place(m) for n, m in last.items()),
        what="every consumer's place written",
    )
    ports = own_ports(broker)
    owner = _owner_of(broker, topic, ports)
    # The worker of the consumers not at the owner, or the owner (another worker then owns the topic).
    killed = owner if victim == "owner" else next(name for name in ports if name != owner)
    victim_pid = worker_pids(broker)[f"pulsar://{broker.host}:{ports[killed]}"]

    receiving = {name: Receiving(c) for name, c in consumers.items()}
    sending = Sending(producer, "live")
    eventually(lambda: sending.count() >= 100, what="receipts before the kill")
    os.kill(victim_pid, signal.SIGKILL)
    eventually(lambda: len(SERVING.findall(broker.log_text())) == 3, what="the killed worker started again")
    mark = sending.count()
    eventually(lambda: sending.count() >= mark + 100, what="receipts after the kill")
    sending.stop()
    assert not sending.failed
    want = sending.receipted

    def all_there() -> bool:
        missing = {n: m for n, r in receiving.items() if (m := r.missing(want))}
        assert not missing, f"consumers missing receipts (how many): {missing}"
        return True

    eventually(all_there, timeout=60, what="every receipt at every consumer")
    for r in receiving.values():
        r.stop()
    for name, r in receiving.items():
        assert not any(p.startswith(b"acked-") for p in r.got), name  # acknowledged and written: not again
        in_order = list(dict.fromkeys(p for p in r.got if p in set(want)))
        assert in_order == want, name  # every message, in order (some twice after the kill)
        if victim == "follower" and name in at_owner:
            assert r.got == want, name  # the owner's consumers saw nothing of it: each once
    assert "exited with -9; starting it again" in broker.log_tail()


def test_after_a_seek_no_place_stored_before_it_is_resumed_on_another_worker(broker_factory, client_factory):
    """A consumer's place stored by a follower before a seek (here: the follower killed with -9
    right after, so that it never writes the place again) is not where the consumer resumes when
    it comes back after the seek, on any worker: every worker's places follow the seek (the
    spread's count of resets in ownership.sqlite, stored with each place)."""
    broker = broker_factory(WORKERS)
    topic, first = spread_topic(broker, client_factory, "seek")
    ports = own_ports(broker)
    owner = _owner_of(broker, topic, ports)
    follower = next(name for name in ports if name != owner)
    producer = client_factory(broker.service_url).create_producer(topic, batching_enabled=False)
    sent = [f"alert-{i}".encode() for i in range(8)]
    for payload in sent:
        producer.send(payload)
    # Not acknowledged: a newcomer starts at the subscription's stored cursor, which the owner
    # moves past what every consumer acknowledged (vehicle would get nothing once it flushed).
    assert [m.data() for m in receive_n(first, len(sent))] == sent

    # "vehicle" on the follower (its own port), on a raw connection that is never closed cleanly.
    raw = RawConnection(ports[follower])
    try:
        raw.handshake()
        broadcast = [wire.KeyValue(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)]
        raw.subscribe(
            topic,
            "fans",
            wire.CommandSubscribe.Exclusive,
            permits=100,
            consumer_name="vehicle",
            initial_position=wire.CommandSubscribe.Earliest,
            metadata=broadcast,
        )
        got = [raw.expect(T.MESSAGE) for _ in sent]
        last = got[-1].body().message_id
        ack = wire.CommandAck(consumer_id=1, ack_type=wire.CommandAck.Cumulative, message_id=[last])
        raw.send_command(ack)
        everything = Position(last.ledger_id, last.entry_id)
        eventually(
            lambda: stored_places(broker).get("vehicle", Position(-1, -1)) >= everything,
            what="the follower's place of vehicle written past every message",
        )
        os.kill(worker_pids(broker)[f"pulsar://{broker.host}:{ports[follower]}"], signal.SIGKILL)
    finally:
        raw.close()
    eventually(lambda: len(SERVING.findall(broker.log_text())) == 3, what="the killed worker started again")

    first.seek(pulsar.MessageId.earliest)  # at the owner: everyone starts over
    assert [m.data() for m in receive_n(first, len(sent), ack=True)] == sent
    assert stored_places(broker)["vehicle"] >= everything  # still there: its writer is gone
    # vehicle comes back (wherever its connection lands): at the seek, not at its place before it.
    back = client_factory(broker.service_url).subscribe(
        topic,
        "fans",
        consumer_type=pulsar.ConsumerType.Exclusive,
        consumer_name="vehicle",
        properties=BROADCAST,
    )
    assert [m.data() for m in receive_n(back, len(sent), ack=True, timeout_ms=10_000)] == sent
