"""An acknowledgement answered once it is on disk, for a home worker's MQTT sessions (``--workers``).

A QoS 2 message an MQTT client answered with PUBREC must never come to it again as a new message
(4.3.3), also after a ``kill -9``. Where the client's session and its subscription's cursor are in
one process, the session keeps the message's key until the cursor has been written with its
acknowledgement (``mqtt/session.py``). Where the topic is another worker's (``mqtt/remote.py``),
the home worker asks the owner: its ACK (with a request id) carries the property ``ON_DISK``, and
the owner sends the ACK_RESPONSE only once its cursor holds those acknowledgements on disk (at
its next flush, ``cursor_flush_interval_seconds``). With the value ``CHECK`` the ACK acknowledges
nothing: it is answered once the positions it names are acknowledged on disk, by whomever (a
restarted home worker asks so of the messages its sessions had received before the crash).

Pulsar's clients never send the property; for them an ACK_RESPONSE comes at once, as in Pulsar.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from magnetar.protocol import wire
from magnetar.protocol.commands import wrap
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.handlers.cnx import HandlerCnx

#: The ACK's property (a KeyLongValue) asking for an answer once on disk; its values:
ON_DISK = "magnetar.ack-on-disk"
#: acknowledge the positions, answer once that is on disk;
ACKNOWLEDGE = 1
#: acknowledge nothing, answer once the positions are acknowledged on disk.
CHECK = 2


def asked(cmd: wire.CommandAck) -> int:
    """What the ACK asks (``ACKNOWLEDGE``, ``CHECK``); 0 for an ordinary one."""
    if not cmd.HasField("request_id"):
        return 0
    for prop in cmd.properties:
        if prop.key == ON_DISK:
            return int(prop.value)
    return 0


def answer_when_on_disk(
    cnx: HandlerCnx,
    consumer: Consumer,
    cursor: ManagedCursor,
    positions: list[Position],
    reply: wire.CommandAckResponse,
) -> None:
    """Send ``reply`` once ``cursor`` has every one of ``positions`` acknowledged on disk (looked
    at each ``cursor_flush_interval_seconds``); never if ``consumer`` or its connection closes
    first (whoever asked then forgets the question)."""
    _Waiter(cnx, consumer, cursor, positions, reply).check()


class _Waiter:
    __slots__ = ("cnx", "consumer", "cursor", "positions", "reply", "seen_at")

    def __init__(
        self,
        cnx: HandlerCnx,
        consumer: Consumer,
        cursor: ManagedCursor,
        positions: list[Position],
        reply: wire.CommandAckResponse,
    ) -> None:
        self.cnx = cnx
        self.consumer = consumer
        self.cursor = cursor
        self.positions = positions
        self.reply = reply
        #: The cursor's count of writes when it was first seen holding them all (None: not yet).
        self.seen_at: int | None = None

    def check(self) -> None:
        if self.cnx.closed:
            return
        if self.consumer.closed:  # answered, so that the asking side forgets the question
            self.reply.error = wire.ConsumerNotFound
            self.reply.message = "the consumer closed before its acknowledgements were on disk"
            self.cnx.send_command(wrap(self.reply))
            return
        cursor = self.cursor
        if self.seen_at is None and all(cursor.is_acked(position) for position in self.positions):
            self.seen_at = cursor.persists
        if self.seen_at is not None and (not cursor.dirty or cursor.persists > self.seen_at):
            self.cnx.send_command(wrap(self.reply))
            return
        asyncio.get_running_loop().call_later(self.cnx.config.cursor_flush_interval_seconds, self.check)
