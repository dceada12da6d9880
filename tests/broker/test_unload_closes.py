"""An unload of many idle topics closes their storage on threads of its own: the opens of other
topics (a new subscription here) are not queued behind thousands of closes (in
bench/many_topics.py clients timed out while an unload sweep closed the topics of the first
phase). The closes are held on a gate; a SUBSCRIBE to a new topic is answered meanwhile."""

from __future__ import annotations

import asyncio
import threading
from functools import partial

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
