"""A broker out of file descriptors answers with an error, says so once, and recovers by itself.

The broker's descriptor limit is lowered from outside (``prlimit``, as ``ulimit -n`` would set
it at start) to what it uses: opening a new topic or subscription then fails with EMFILE.
"""

from __future__ import annotations

import os
import resource
import threading

import pulsar
import pytest

from magnetar.protocol import wire

from ..waiting import eventually
from .support import RawConnection, labelled, receive_n

pytestmark = pytest.mark.interop

BASE = wire.BaseCommand
OUT_OF_FDS_LOG = "out of file descriptors (limit"


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def set_soft_limit(pid: int, soft: int) -> None:
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))


def refusals(broker) -> dict[str, float]:
    return labelled(broker, "magnetar_out_of_file_descriptors_total", "what")


def expect_error(raw: RawConnection, code: int) -> str:
    frame = raw.recv_frame(timeout=5)
    assert frame is not None, "the broker closed the connection without an answer"
    assert frame.type == BASE.ERROR, frame.command
    assert frame.body().error == code, frame.command
    return frame.body().message


def test_out_of_file_descriptors_is_answered_logged_once_counted_and_recovered_from(
    broker, client, client_factory, topic
):
    pid = broker.proc.pid
    assert pid is not None
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "existing")
    producer.send(b"before")
    assert receive_n(consumer, 1, ack=True)[0].data() == b"before"
    raws = []
    for _ in range(40):  # connections whose closing frees descriptors later
        raw = RawConnection(broker.port)
        raw.handshake()
        raws.append(raw)

    set_soft_limit(pid, open_fds(pid))  # not one descriptor left
    try:
        for attempt in range(3):
            raws[0].send_command(
                wire.CommandProducer(topic=f"{topic}-new", producer_id=attempt, request_id=attempt)
            )
            assert "out of file descriptors" in expect_error(raws[0], wire.PersistenceError)
        raws[1].send_command(
            wire.CommandSubscribe(
                topic=topic,
                subscription="new-sub",
                sub_type=wire.CommandSubscribe.Shared,
                consumer_id=1,
                request_id=1,
            )
        )
        assert "out of file descriptors" in expect_error(raws[1], wire.PersistenceError)
        # What is open goes on working.
        producer.send(b"during")
        assert receive_n(consumer, 1, ack=True)[0].data() == b"during"
        raws[0].send_command(wire.CommandPing())
        assert raws[0].expect(BASE.PONG)

        # Descriptors come free: new topics, subscriptions and clients work again, unasked.
        for raw in raws[2:]:
            raw.close()
        fresh = client_factory(broker.service_url)
        new_producer = fresh.create_producer(f"{topic}-new")
        new_consumer = fresh.subscribe(topic, "new-sub", initial_position=pulsar.InitialPosition.Earliest)
        new_producer.send(b"after")
        producer.send(b"after")
        assert [m.data() for m in receive_n(new_consumer, 3, ack=True)] == [b"before", b"during", b"after"]

        # Near the limit a new connection's CONNECT is answered with an error, not dropped.
        set_soft_limit(pid, open_fds(pid) + 4)
        refused = RawConnection(broker.port)
        refused.send_command(wire.CommandConnect(client_version="late", protocol_version=20))
        assert "out of file descriptors" in expect_error(refused, wire.ServiceNotReady)
        assert refused.recv_frame() is None  # then closed
        refused.close()
    finally:
        set_soft_limit(pid, 4096)
    late = RawConnection(broker.port)
    late.handshake()
    late.close()

    counts = refusals(broker)
    assert counts["topic"] == 3 and counts["subscription"] == 1 and counts["connection"] == 1
    log = broker.log_text()
    assert log.count(OUT_OF_FDS_LOG) == 1, log  # once, not per attempt
    for raw in raws[:2]:
        raw.close()


def test_a_client_asking_for_a_topic_while_descriptors_are_short_gets_it_once_they_are_back(
    broker, client, topic
):
    """The official client retries the broker's PersistenceError (a temporary error to it), so a
    producer asked for during the shortage is created once descriptors are free, within its timeout."""
    pid = broker.proc.pid
    assert pid is not None
    client.get_topic_partitions(f"{topic}-other")  # the client's connection is open before the shortage
    raws = [RawConnection(broker.port) for _ in range(40)]
    for raw in raws:
        raw.handshake()
    set_soft_limit(pid, open_fds(pid))
    created: list[object] = []
    try:
        creating = threading.Thread(target=lambda: created.append(client.create_producer(topic)))
        creating.start()
        eventually(lambda: OUT_OF_FDS_LOG in broker.log_text(), what="a refusal for want of descriptors")
        for raw in raws:
            raw.close()
        creating.join(15)
        assert created, "the producer was not created once descriptors were free"
        created[0].send(b"made it")
    finally:
        set_soft_limit(pid, 4096)
