"""Consumers on a real topic without sockets: their connections record what they are sent.

For the dispatcher tests (broadcast, chunked messages): thousands of consumers in a second.
"""

from __future__ import annotations

import asyncio

from magnetar.broker.consumer import Consumer
from magnetar.protocol import FrameDecoder, wire
from magnetar.storage.position import Position
from tests.waiting import eventually_async


class RecordingCnx:
    """What a Consumer needs of its connection; MESSAGE frames are decoded and kept."""

    wants_entry_metadata = False
    remote = "recorded:0"

    def __init__(self) -> None:
        self.writable = True
        self.closed = False
        self.closed_consumers: list[int] = []  # CLOSE_CONSUMER sent, and the consumer forgotten
        self.received: list[tuple[Position, int]] = []  # (position, redelivery count)
        self.commands: list[wire.BaseCommand] = []
        self._decoder = FrameDecoder(1 << 24)

    def write_many(self, frames: list[bytes]) -> None:
        self._decoder.feed(b"".join(bytes(f) for f in frames))
        for frame in self._decoder.frames():
            msg = frame.command.message
            self.received.append(
                (Position(msg.message_id.ledger_id, msg.message_id.entry_id), msg.redelivery_count)
            )

    def send_command(self, command: wire.BaseCommand) -> None:
        self.commands.append(command)

    def send_close_consumer(self, consumer_id: int) -> None:
        self.closed_consumers.append(consumer_id)

    def forget_consumer(self, consumer_id: int) -> None:
        pass

    def positions(self) -> list[Position]:
        return [p for p, _ in self.received]


async def sent_to(consumer: Consumer, count: int) -> list[Position]:
    """Wait until ``consumer``'s connection has been sent at least ``count`` messages; their positions.

    The test then asserts exactly what was sent: one more than expected fails it, and so does a
    wrong one.
    """
    received = consumer.cnx.received
    await eventually_async(
        lambda: len(received) >= count,
        what=f"{count} messages sent to {consumer.name}",
    )
    return consumer.cnx.positions()


async def publish(h, *datas: bytes) -> list[Position]:
    return list(await asyncio.gather(*(h.publish_nowait(d) for d in datas)))


def ack(consumer: Consumer, *positions: Position, cumulative: bool = False) -> None:
    cmd = wire.CommandAck(
        consumer_id=consumer.consumer_id,
        ack_type=wire.CommandAck.Cumulative if cumulative else wire.CommandAck.Individual,
    )
    for p in positions:
        cmd.message_id.add(ledger_id=p.ledger_id, entry_id=p.entry_id)
    consumer.subscription.acknowledge(cmd, consumer)
