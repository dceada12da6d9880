"""Many topics created at once do not stall other clients, and every one a client was told about survives
kill -9 (precise timings: bench/topic_storm.py)."""

from __future__ import annotations

import threading

import pulsar
import pytest

from magnetar.protocol import wire

from .support import RawConnection, admin_call

pytestmark = pytest.mark.interop

TOPICS = 1000
CONNECTIONS = 4


def _subscribe_all(port: int, topics: list[str], confirmed: list[str]) -> None:
    """SUBSCRIBE to every topic back to back on one connection, then collect the SUCCESSes."""
    raw = RawConnection(port, timeout=60)
    raw.handshake()
    by_id = dict(enumerate(topics, start=1))
    for consumer_id, topic in by_id.items():
        raw.send_command(
            wire.CommandSubscribe(
                topic=topic,
                subscription="storm",
                sub_type=wire.CommandSubscribe.Shared,
                consumer_id=consumer_id,
                request_id=consumer_id,
            )
        )
    for _ in by_id:
        frame = raw.expect(wire.BaseCommand.SUCCESS, timeout=60)
        confirmed.append(by_id[frame.body().request_id])
    raw.close()


@pytest.mark.slow
def test_a_storm_of_new_topics_leaves_a_canary_alone_and_survives_kill9(broker, client_factory, topic):
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "canary")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"warm-up")
    consumer.acknowledge(consumer.receive(5000))

    names = [f"{topic}-storm-{i}" for i in range(TOPICS)]
    confirmed: list[str] = []
    threads = [
        threading.Thread(target=_subscribe_all, args=(broker.port, names[i::CONNECTIONS], confirmed))
        for i in range(CONNECTIONS)
    ]
    for thread in threads:
        thread.start()
    progress: list[int] = []  # the topics confirmed as each canary send completed
    while any(thread.is_alive() for thread in threads):
        producer.send(b"canary-%d" % len(progress))
        progress.append(len(confirmed))
    for thread in threads:
        thread.join()

    assert sorted(confirmed) == sorted(names)
    # The canary was served while the storm went on, not held until its end (how long its sends
    # took meanwhile is bench/topic_storm.py's canary_send_max_s).
    assert any(0 < done < TOPICS for done in progress), f"confirmed at each canary send: {progress[:50]}"
    for i in range(len(progress)):
        assert consumer.receive(5000).data() == b"canary-%d" % i

    broker.kill9()
    broker.restart()
    status, stored = admin_call(broker, "GET", "/admin/v2/persistent/public/default")
    assert status == 200 and set(names) <= set(stored)
    for name in names[:: TOPICS // 10]:
        local = name.removeprefix("persistent://")
        status, subscriptions = admin_call(broker, "GET", f"/admin/v2/persistent/{local}/subscriptions")
        assert (status, subscriptions) == (200, ["storm"])
    producer = client_factory(broker.service_url).create_producer(names[-1])
    producer.send(b"after")  # the subscription made before the kill holds it
    status, stats = admin_call(
        broker, "GET", f"/admin/v2/persistent/{names[-1].removeprefix('persistent://')}/stats"
    )
    assert stats["subscriptions"]["storm"]["msgBacklog"] == 1


def test_a_refused_topic_in_a_storm_gets_its_error(broker):
    raw = RawConnection(broker.port)
    raw.handshake()
    raw.send_command(
        wire.CommandSubscribe(
            topic="persistent://no-such-tenant/ns/t",
            subscription="s",
            sub_type=wire.CommandSubscribe.Shared,
            consumer_id=1,
            request_id=7,
        )
    )
    reply = raw.expect(wire.BaseCommand.ERROR).body()
    assert reply.request_id == 7 and reply.error == wire.TopicNotFound
    raw.close()


def test_producers_and_readers_on_new_topics_are_served(client, topic):
    producers = [client.create_producer(f"{topic}-{i}") for i in range(5)]
    for i, producer in enumerate(producers):
        producer.send(b"m%d" % i)
    for i in range(5):
        reader = client.create_reader(f"{topic}-{i}", pulsar.MessageId.earliest)
        assert reader.read_next(5000).data() == b"m%d" % i
