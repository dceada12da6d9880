"""An unload of many idle topics closes their storage on threads of its own: the opens of other
topics (a new subscription here) are not queued behind thousands of closes (in
bench/many_topics.py clients timed out while an unload sweep closed the topics of the first
phase). The closes are held on a gate; a SUBSCRIBE to a new topic is answered meanwhile."""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from functools import partial

import pulsar

from magnetar.broker.config import BrokerConfig
from magnetar.broker.topic_loader import OPEN_THREADS
from magnetar.cli.standalone import Standalone
from magnetar.protocol import wire
from magnetar.protocol.topic_name import TopicName
from tests.interop.support import RawConnection

IDLE = [TopicName.parse(f"persistent://public/default/idle-{i}") for i in range(OPEN_THREADS + 1)]


def test_opens_are_not_queued_behind_the_closes_of_unloaded_topics(tmp_path):
    config = BrokerConfig.load(None, data_dir=tmp_path / "data", port=0, http_port=0)
    gate = threading.Event()
    closed: list[str] = []  # the unloaded topics whose close ran (the gate opened or timed out)
    answered_while_held: list[bool] = []

    def subscribe(port: int) -> None:
        raw = RawConnection(port)
        try:
            raw.handshake()
            raw.send_command(
                wire.CommandSubscribe(
                    topic="persistent://public/default/new",
                    subscription="s",
                    sub_type=wire.CommandSubscribe.Shared,
                    consumer_id=1,
                    request_id=1,
                )
            )
            raw.expect(wire.BaseCommand.SUCCESS, timeout=60)
            answered_while_held.append(not closed)
        finally:
            gate.set()
            raw.close()

    def held_close(close, name: str) -> None:
        gate.wait(10)  # until the SUBSCRIBE is answered (or, queued behind this, never)
        closed.append(name)
        close()

    async def scenario() -> None:
        standalone = Standalone(config)
        await standalone.start()
        service = standalone.broker
        try:
            for name in IDLE:
                await service.preparing(name)
                topic = service.topics[str(name)]
                topic.close_storage = partial(held_close, topic.close_storage, str(name))
                service.loader.unload(topic)
            await asyncio.to_thread(subscribe, service.port)
        finally:
            gate.set()
            await standalone.stop()

    asyncio.run(scenario())
    assert answered_while_held == [True]


NAMESPACE_TOPICS = [f"persistent://public/default/unload-{i}" for i in range(6)]


def produce_one_each(url: str, topics: list[str]) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        for topic in topics:
            producer = client.create_producer(topic)
            producer.send(f"kept in {topic}".encode())
            producer.close()
    finally:
        client.close()


def read_one_each(url: str, topics: list[str]) -> dict[str, bytes]:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        read = {}
        for topic in topics:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            read[topic] = reader.read_next(10_000).data()
            reader.close()
        return read
    finally:
        client.close()


def http(method: str, url: str) -> int:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=60) as response:
        return response.status


def test_a_namespace_unload_closes_the_topics_off_the_loop_and_they_load_again_intact(tmp_path):
    """The closes of a namespace's topics (fsyncs, commits: seconds for thousands of topics) run
    on the close threads while the loop serves others: with every close held on a gate, another
    HTTP request is answered; once they are let go the unload answers 204, every topic's storage
    was closed, and each topic loads again with its message."""
    config = BrokerConfig.load(None, data_dir=tmp_path / "data", port=0, http_port=0)
    began, gate = threading.Event(), threading.Event()
    closed: list[str] = []
    health_while_held: list[bool] = []

    def held_close(close, name: str) -> None:
        began.set()
        gate.wait(5)  # until the health request is answered (on a stalled loop: 5 s a topic)
        closed.append(name)
        close()

    def ask_health(web: str) -> None:
        try:
            assert began.wait(30), "the unload closed no topic"
            assert http("GET", f"{web}/admin/v2/brokers/health") == 200
            health_while_held.append(not closed)
        finally:
            gate.set()

    async def scenario() -> dict[str, bytes]:
        standalone = Standalone(config)
        await standalone.start()
        service, web = standalone.broker, standalone.admin.web_urls()[0]
        assert web is not None
        try:
            await asyncio.to_thread(produce_one_each, service.service_url, NAMESPACE_TOPICS)
            for name in NAMESPACE_TOPICS:
                topic = service.topics[name]
                topic.close_storage = partial(held_close, topic.close_storage, name)
            unload = asyncio.ensure_future(
                asyncio.to_thread(http, "PUT", f"{web}/admin/v2/namespaces/public/default/unload")
            )
            await asyncio.to_thread(ask_health, web)
            assert await unload == 204
            assert sorted(closed) == sorted(NAMESPACE_TOPICS)
            assert not any(name in service.topics for name in NAMESPACE_TOPICS)
            return await asyncio.to_thread(read_one_each, service.service_url, NAMESPACE_TOPICS)
        finally:
            gate.set()
            await standalone.stop()

    read = asyncio.run(scenario())
    assert health_while_held == [True]
    assert read == {topic: f"kept in {topic}".encode() for topic in NAMESPACE_TOPICS}
