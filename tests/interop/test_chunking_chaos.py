"""A randomized run, bounded in time, its seed logged (set ``CHUNK_CHAOS_SEED`` to replay one).

Three producers (two official, one ours) send chunked and small keyed messages; a Shared and a
Key_Shared subscription each have three consumers (two ours, one official) that join, leave,
nack and stall at random; the broker is restarted meanwhile. Then the chaos stops and every
consumer reads on. What must hold, per subscription:

* every message whose send succeeded arrives, whole (its bytes' digest is the one sent);
* none arrives again after it was acknowledged, unless a restart began right after that
  acknowledgement (an acknowledgement on its way when the broker stops is lost, in Pulsar too) or
  it was acknowledged while its consumer was reconnecting (a message taken from the receive queue
  then was given to another consumer when the old connection went; the acknowledgement, sent once
  connected again, comes after that, as with Pulsar's clients);
* nothing stalls: all arrive within the drain time, and the backlog drains to zero.

The official Shared consumer runs without an ack timeout, the Key_Shared one with one. Up to C++
client 4.2.0 (pulsar-client 3.13) a consumer assembling a chunked message when its connection
breaks keeps the partial message, and would drop the message sent again from its first chunk;
the broker sends it so that the client assembles it (``broker/chunk_watch.py``), so neither needs
its ack timeout for that.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import logging
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field

import pulsar
import pytest

from magnetar.client import Client, ConsumerType

from ..waiting import eventually
from .support import admin_call

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: a chaos run of thousands of messages

log = logging.getLogger(__name__)

SMALL = 64 * 1024
KEYS = [f"key-{i}" for i in range(8)]
MESSAGES_PER_PRODUCER = 40
CHAOS_SECONDS = 14.0
DRAIN_SECONDS = 60.0
#: An acknowledgement this recent when a restart begins may have been lost on its way.
ACK_IN_FLIGHT_S = 1.0


@dataclass
class Delivery:
    consumer: str
    at: float
    acked_at: float | None = None
    acked_connected: bool = True  # whether its consumer was connected when it acknowledged
    entry: str = ""  # the message id it came with: two entries are two stored copies


@dataclass
class Record:
    """What the run did and saw, shared by its threads."""

    sent: dict[str, str] = field(default_factory=dict)  # message id -> digest, sends that succeeded
    failed: list[str] = field(default_factory=list)
    deliveries: dict[tuple[str, str], list[Delivery]] = field(default_factory=dict)  # (sub, id)
    received: list[tuple[str, str, str]] = field(default_factory=list)  # (sub, id, digest)
    restarts: list[tuple[float, float]] = field(default_factory=list)  # (stop begun, started again)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self, sub: str, consumer: str, data: bytes, entry: str) -> Delivery:
        msg_id = data.split(b"|", 1)[0].decode()
        delivery = Delivery(consumer, time.monotonic(), entry=entry)
        with self.lock:
            self.deliveries.setdefault((sub, msg_id), []).append(delivery)
            self.received.append((sub, msg_id, digest(data)))
        return delivery

    def acked(self, sub: str) -> set[str]:
        with self.lock:
            return {m for (s, m), ds in self.deliveries.items() if s == sub and any(d.acked_at for d in ds)}

    def damaged(self) -> list[tuple[str, str]]:
        """Deliveries whose bytes are not those sent (checked once every send's callback ran)."""
        return [(sub, m) for sub, m, got in self.received if m in self.sent and self.sent[m] != got]

    def timeline(self, sub: str, msg_id: str) -> str:
        """A message's deliveries and the restarts, in seconds from the first delivery: to read a failure."""
        deliveries = self.deliveries[(sub, msg_id)]
        t0 = deliveries[0].at

        def at(t: float | None) -> str:
            return "-" if t is None else f"{t - t0:+.3f}"

        seen = [f"{d.consumer} @ {at(d.at)} ack {at(d.acked_at)} {d.entry}" for d in deliveries]
        return "; ".join(seen + [f"restart {at(b)}..{at(e)}" for b, e in self.restarts])

    def ack_may_be_lost(self, acked_at: float) -> bool:
        """An acknowledgement given while a restart was near may not have reached the broker."""
        return any(
            begun - ACK_IN_FLIGHT_S <= acked_at <= ended + ACK_IN_FLIGHT_S for begun, ended in self.restarts
        )


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def payload(rng: random.Random, producer: str, seq: int) -> bytes:
    size = rng.randint(100 * 1024, 400 * 1024) if rng.random() < 0.35 else rng.randint(10, 2000)
    return f"{producer}:{seq}|".encode() + rng.randbytes(size)


# -- the actors ------------------------------------------------------------------------------------


def produce(name: str, producer, rng: random.Random, record: Record, ours: bool) -> None:
    for seq in range(MESSAGES_PER_PRODUCER):
        data = payload(rng, name, seq)
        msg_id = data.split(b"|", 1)[0].decode()

        def done(result, _message_id, msg_id=msg_id, data=data) -> None:
            ok = result == 0 if ours else result == pulsar.Result.Ok
            with record.lock:
                if ok:
                    record.sent[msg_id] = digest(data)
                else:
                    record.failed.append(f"{msg_id}: {result}")

        producer.send_async(data, done, partition_key=rng.choice(KEYS))
        time.sleep(rng.uniform(0.05, 0.5))  # pacing: sends spread over the chaos
    producer.flush()


class ConsumerSlot:
    """One consumer place of a subscription: subscribes, receives and acknowledges; while chaos is on,
    now and then leaves (and comes back), stalls, or nacks what it got."""

    def __init__(self, name: str, sub: str, subscribe, rng: random.Random, record: Record) -> None:
        self.name, self.sub = name, sub
        self.subscribe = subscribe  # () -> a consumer of either client
        self.rng, self.record = rng, record
        self.consumer = None

    def run(self, chaos: threading.Event, restarting: threading.Event, done: threading.Event) -> None:
        next_trick = time.monotonic() + self.rng.expovariate(1 / 3)
        while not done.is_set():
            if self.consumer is None:
                if restarting.is_set():
                    time.sleep(0.1)  # the chaos's pace: come back once the restart is over
                    continue
                with contextlib.suppress(Exception):
                    self.consumer = self.subscribe()
                continue
            if chaos.is_set() and not restarting.is_set() and time.monotonic() >= next_trick:
                next_trick = time.monotonic() + self.rng.expovariate(1 / 3)
                if self.trick():
                    continue
            self.receive_one(nack=chaos.is_set() and self.rng.random() < 0.1)
        self.leave()

    def trick(self) -> bool:
        """Leave or stall at random; True if the consumer left."""
        if self.rng.random() < 0.5:
            self.leave()
            time.sleep(self.rng.uniform(0.2, 1.5))  # away a while: the chaos itself
            return True
        time.sleep(self.rng.uniform(0.5, 3.0))  # holding what it received, reading nothing
        return False

    def receive_one(self, nack: bool) -> None:
        try:
            msg = self.consumer.receive(200)
        except Exception:  # a timeout, or a broker restarting
            return
        delivery = self.record.delivered(self.sub, self.name, msg.data(), str(msg.message_id()))
        with contextlib.suppress(Exception):
            if nack:
                self.consumer.negative_acknowledge(msg)
            else:
                connected = self.consumer.is_connected()
                self.consumer.acknowledge(msg)
                delivery.acked_connected = connected and self.consumer.is_connected()
                delivery.acked_at = time.monotonic()

    def leave(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close()


def consumer_slots(
    topic: str, official, ours: Client, master: random.Random, record: Record
) -> list[ConsumerSlot]:
    """Per subscription, two consumers of ours and one official one (with an ack timeout)."""
    slots = []
    for sub, ours_type, theirs_type, ack_timeout in [
        ("shared", ConsumerType.Shared, pulsar.ConsumerType.Shared, {}),
        (
            "ks",
            ConsumerType.KeyShared,
            pulsar.ConsumerType.KeyShared,
            {"unacked_messages_timeout_ms": 10_000},
        ),
    ]:
        options = dict(subscription_name=sub, negative_ack_redelivery_delay_ms=300)
        for name, client, extra in [
            (f"{sub}-ours-0", ours, dict(consumer_type=ours_type)),
            (f"{sub}-ours-1", ours, dict(consumer_type=ours_type)),
            (
                f"{sub}-official",
                official,
                dict(consumer_type=theirs_type, **ack_timeout),
            ),
        ]:
            kwargs = {**options, **extra, "consumer_name": name}
            subscribe = functools.partial(client.subscribe, topic, **kwargs)
            slots.append(ConsumerSlot(name, sub, subscribe, random.Random(master.random()), record))
    return slots


def restart_now_and_then(
    broker, rng: random.Random, record: Record, chaos: threading.Event, restarting
) -> None:
    deadline = time.monotonic() + CHAOS_SECONDS
    for _ in range(2):
        time.sleep(rng.uniform(2.0, 5.0))  # the chaos's pace: a restart every few seconds
        if time.monotonic() > deadline:
            break
        restarting.set()
        begun = time.monotonic()
        broker.stop(signal.SIGTERM)
        broker.restart()
        with record.lock:
            record.restarts.append((begun, time.monotonic()))
        restarting.clear()
    while chaos.is_set() and time.monotonic() < deadline:  # the chaos lasts CHAOS_SECONDS
        time.sleep(0.1)


# -- the run ----------------------------------------------------------------------------------------


def test_chunked_and_small_messages_under_chaos_arrive_whole_once_and_never_stall(
    broker_factory, client_factory, topic
):
    seed = int(os.environ.get("CHUNK_CHAOS_SEED", random.randrange(2**32)))
    print(f"CHUNK_CHAOS_SEED={seed}")
    log.warning("chunk chaos seed %d (CHUNK_CHAOS_SEED=%d replays it)", seed, seed)
    master = random.Random(seed)
    broker = broker_factory({"max_message_size": SMALL})
    record = Record()
    chaos, restarting, done = threading.Event(), threading.Event(), threading.Event()
    chaos.set()

    official = client_factory(broker.service_url)
    ours = Client(broker.service_url, operation_timeout_seconds=10, max_backoff_seconds=0.5)
    threads: list[threading.Thread] = []
    try:
        slots = consumer_slots(topic, official, ours, master, record)
        for slot in slots:  # every subscription exists before the first message
            slot.consumer = slot.subscribe()
        chunking = dict(chunking_enabled=True, send_timeout_millis=60_000)
        producers = [
            ("official-0", official.create_producer(topic, batching_enabled=False, **chunking), False),
            ("official-1", official.create_producer(topic, batching_enabled=False, **chunking), False),
            ("ours", ours.create_producer(topic, **chunking), True),
        ]
        threads = [threading.Thread(target=s.run, args=(chaos, restarting, done), daemon=True) for s in slots]
        restarts = random.Random(master.random())
        threads.append(
            threading.Thread(
                target=restart_now_and_then, args=(broker, restarts, record, chaos, restarting), daemon=True
            )
        )
        producing = [
            threading.Thread(
                target=produce, args=(name, p, random.Random(master.random()), record, is_ours), daemon=True
            )
            for name, p, is_ours in producers
        ]
        for thread in threads + producing:
            thread.start()
        for thread in producing:
            thread.join(120)
        threads[-1].join(60)  # the restarts are over
        chaos.clear()

        expected = set(record.sent)
        assert not record.failed, f"sends failed: {record.failed[:5]}"
        assert len(expected) == 3 * MESSAGES_PER_PRODUCER

        def all_acked() -> bool:
            missing = {s: sorted(expected - record.acked(s))[:5] for s in ("shared", "ks")}
            assert not any(missing.values()), f"seed {seed}: not yet acknowledged: {missing}"
            return True

        eventually(all_acked, timeout=DRAIN_SECONDS, interval=0.2, what="every message acknowledged")
    finally:
        done.set()
        for thread in threads:
            thread.join(30)
        ours.close()

    assert not record.damaged(), f"seed {seed}: messages that arrived damaged: {record.damaged()[:5]}"
    for sub in ("shared", "ks"):
        missing = expected - record.acked(sub)
        assert not missing, (
            f"seed {seed}: {len(missing)} messages never arrived on {sub}: {sorted(missing)[:5]}"
        )
    for (sub, msg_id), deliveries in record.deliveries.items():
        for before, after in itertools.pairwise(deliveries):
            if before.acked_at is None:
                continue  # nacked, or its consumer left or stalled without acking: it comes again
            if not before.acked_connected:
                continue  # acknowledged while reconnecting: the broker had given it to another
            assert record.ack_may_be_lost(before.acked_at), (
                f"seed {seed}: {msg_id} came again on {sub} ({after.consumer}) after {before.consumer} "
                f"acknowledged it, with no restart near to lose that acknowledgement: "
                f"{record.timeline(sub, msg_id)}"
            )
    path = topic.replace("persistent://", "/admin/v2/persistent/") + "/stats"

    def drained() -> bool:
        stats = admin_call(broker, "GET", path)[1]
        backlogs = [stats["subscriptions"][s]["msgBacklog"] for s in ("shared", "ks")]
        assert backlogs == [0, 0], f"seed {seed}: backlogs {backlogs} after everything was acknowledged"
        return True

    eventually(drained, interval=0.2, what="both backlogs drained")
    print(
        f"seed {seed}: {len(expected)} messages, {len(record.restarts)} restarts, "
        f"{sum(len(d) for d in record.deliveries.values())} deliveries"
    )
