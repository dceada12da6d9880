"""What a stored PUBLISH is answered (inbound._Answer), without a network: PUBACK once stored,
with RETAIN once its retained message is stored too, and nothing of it left for the garbage
collector (a closure that named itself kept every packet until a collection found it)."""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass, field

from magnetar.broker.mqtt import inbound
from magnetar.protocol.mqtt import Publish
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.position import Position

NAME = TopicName.parse("persistent://public/default/cars%2F7")


@dataclass
class Retained:
    set_calls: list[tuple[str, object]] = field(default_factory=list)
    future: asyncio.Future[None] | None = None

    def set(self, topic: str, retained: object) -> asyncio.Future[None]:
        self.set_calls.append((topic, retained))
        assert self.future is not None
        return self.future


@dataclass
class Server:
    retained: Retained = field(default_factory=Retained)


@dataclass
class Connection:
    """What ``_Answer`` uses of an MqttConnection."""

    server: Server = field(default_factory=Server)
    closed: bool = False
    version: int = 4
    stored: int = 0
    answered_ids: list[tuple[int, int]] = field(default_factory=list)
    sent: list[tuple[int, int, object]] = field(default_factory=list)

    def store_done(self) -> None:
        self.stored += 1

    def answered(self, qos: int, packet_id: int) -> None:
        self.answered_ids.append((qos, packet_id))

    def send_answer(self, qos: int, packet_id: int, answer: object) -> None:
        self.sent.append((qos, packet_id, answer))

    def acknowledge(self, packet_id: int, puback: bytes) -> None:
        self.answered(1, packet_id)
        self.send_answer(1, packet_id, puback)


def test_a_stored_message_is_answered_and_leaves_nothing_for_the_collector():
    cnx = Connection()
    gc.collect()
    gc.disable()
    try:
        for packet_id in range(1, 51):
            answer = inbound._Answer(cnx, Publish("cars/7", b"x", 1, packet_id=packet_id), NAME, 0.0)  # type: ignore[arg-type]
            answer(Position(1, packet_id), None)
            del answer
        assert gc.collect() == 0  # every answer, packet and its parts freed as they went
    finally:
        gc.enable()
    assert cnx.stored == 50
    assert cnx.sent[0] == (1, 1, b"\x40\x02\x00\x01")  # PUBACK of success, as its four bytes
    assert [packet_id for _, packet_id, _ in cnx.sent] == list(range(1, 51))


def test_a_message_not_stored_is_not_acknowledged(monkeypatch):
    cnx = Connection(version=5)
    refused: list[str] = []
    monkeypatch.setattr(inbound, "_refused", lambda c, p, r, message: refused.append(message))
    answer = inbound._Answer(cnx, Publish("cars/7", b"x", 1, packet_id=9), NAME, 0.0)  # type: ignore[arg-type]
    answer(None, RuntimeError("disk"))
    assert cnx.sent == [] and cnx.stored == 1 and "disk" in refused[0]


def test_a_retained_message_is_answered_once_its_retained_copy_is_stored():
    async def run() -> None:
        cnx = Connection()
        cnx.server.retained.future = asyncio.get_running_loop().create_future()
        answer = inbound._Answer(cnx, Publish("cars/7", b"on", 1, True, packet_id=4), NAME, 0.0)  # type: ignore[arg-type]
        answer(Position(1, 1), None)
        assert cnx.sent == [] and cnx.server.retained.set_calls[0][0] == str(NAME)
        cnx.server.retained.future.set_result(None)
        await asyncio.sleep(0)  # one pass of the loop: the future's done callbacks (no timing)
        assert [(qos, packet_id) for qos, packet_id, _ in cnx.sent] == [(1, 4)]
        assert len(cnx.server.retained.set_calls) == 1  # set once, answered once

    asyncio.run(run())
