"""Many topics, few descriptors: a broker killed with -9 while every one of hundreds of topics has
sends in flight (most of their files closed by the ledger-file bound, so each reopens to be
written) recovers each topic on its first use: every receipted message is there, once, in order,
and the topic takes new messages (issue 40)."""

from __future__ import annotations

import contextlib
import threading

import pulsar
import pytest

from .support import admin_call

pytestmark = pytest.mark.interop

TOPICS = 200
#: Far fewer than the topics' files: most topics are written after their files were closed.
MAX_OPEN_LEDGER_FILES = 16


def read_all(client: pulsar.Client, name: str) -> list[bytes]:
    reader = client.create_reader(name, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(10_000).data())
    reader.close()
    return got


@pytest.mark.slow
def test_kill9_with_many_topics_half_written_recovers_each_one(broker_factory, client_factory, topic):
    broker = broker_factory({"max_open_ledger_files": MAX_OPEN_LEDGER_FILES})
    client = client_factory(broker.service_url)
    names = [f"{topic}-{i}" for i in range(TOPICS)]
    producers = [client.create_producer(name, batching_enabled=False) for name in names]
    receipted: dict[str, list[bytes]] = {name: [] for name in names}
    lock = threading.Lock()
    for name, producer in zip(names, producers, strict=True):
        producer.send(b"first")
        receipted[name].append(b"first")

    some_receipted = threading.Event()

    def on_receipt(name: str, data: bytes):
        def done(result, _message_id) -> None:
            if result == pulsar.Result.Ok:
                with lock:
                    receipted[name].append(data)
                some_receipted.set()

        return done

    for n in range(3):  # in flight on every topic when the broker dies
        for name, producer in zip(names, producers, strict=True):
            data = b"second-%d" % n
            producer.send_async(data, on_receipt(name, data))
    assert some_receipted.wait(30)
    broker.kill9()
    # What was in flight and not receipted is not sent again. The client closes whatever its
    # producers say: each one's close fails NotConnected with the broker gone, under load.
    with contextlib.suppress(pulsar.NotConnected):
        client.close()
    with lock:
        expected = {name: list(datas) for name, datas in receipted.items()}

    broker.restart()
    after = client_factory(broker.service_url)
    sent = {b"first", b"second-0", b"second-1", b"second-2"}
    for name in names:
        got = read_all(after, name)
        assert got[: len(expected[name])] == expected[name], name  # each receipted one, in order
        assert len(got) == len(set(got)) and set(got) <= sent, (name, got)  # once, nothing else
    for name in names[:: TOPICS // 10]:
        after.create_producer(name).send(b"after")
        assert read_all(after, name)[-1] == b"after"
    status, stored = admin_call(broker, "GET", "/admin/v2/persistent/public/default")
    assert status == 200 and set(names) <= set(stored)
