"""Memory for a large MQTT packet being received, out of the broker's budget for large frames
(``max_incomplete_frame_bytes``, frame_budget.py), as the Pulsar port takes it for its frames.

A PUBLISH may be as large as ``mqtt_message_max_length`` (64 MiB by default); without a bound,
connections that each begin one and send part of it would make the broker hold that much
apiece. So as soon as a packet of ``LARGE_PACKET`` bytes or more is announced (its fixed
header), its connection reserves its size; while there is no room it is not read (TCP holds the
client back) and waits in line with the Pulsar connections. The room is given back once the
packet is whole (or the connection closes). A packet that holds its room for
``incomplete_frame_timeout_seconds`` while others wait loses its connection (5.0: DISCONNECT
0x97 Quota exceeded): honest clients send a packet in one go.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from magnetar.broker.flow_control import Hold, ReadHolds
from magnetar.protocol.mqtt import ReasonCode

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection

log = logging.getLogger(__name__)

#: A packet this large or larger reserves its size before it is read.
LARGE_PACKET = 1024 * 1024


class PacketRoom:
    """One connection's reservation (a ``FrameReceiver`` of the broker's ``FrameBudget``)."""

    __slots__ = ("_holds", "cnx", "size")

    def __init__(self, cnx: MqttConnection) -> None:
        self.cnx = cnx
        #: FRAMES while it waits for room; the budget asks whether a holder is held for the
        #: broker's own reasons (never, here). Made at the first wait (most connections never do).
        self._holds: ReadHolds | None = None
        #: The bytes reserved (0: none).
        self.size = 0

    @property
    def remote(self) -> str:
        return self.cnx.remote

    @property
    def holds(self) -> ReadHolds:
        if self._holds is None:
            self._holds = ReadHolds(self._waiting, self.cnx.room_granted)
        return self._holds

    @property
    def waiting(self) -> bool:
        return self._holds is not None and bool(self._holds.held)

    def update(self) -> bool:
        """After bytes came or packets were taken: reserve for a large packet begun, give back
        the room of one finished. False while the connection must wait for room."""
        pending = self.cnx.decoder.pending_size
        if pending == self.size and (pending or not self.waiting):
            return not self.waiting
        if self.size:
            self.release()
        if pending < LARGE_PACKET:
            return True
        service = self.cnx.service
        self.size = pending
        if service.frame_budget.reserve(self, pending, time.monotonic()):
            return True
        self.holds.hold(Hold.FRAMES)
        service.frame_budget_full(self, pending)
        return False

    def release(self) -> None:
        """Give the room back (or leave the line)."""
        if self.size:
            self.size = 0
            self.cnx.service.frame_room_released(self)
        if self._holds is not None:
            self._holds.release(Hold.FRAMES)

    def _waiting(self) -> None:
        """The first hold: the connection stops being read (``MqttConnection._may_read``)."""
        self.cnx.hold_for_room()

    # -- FrameReceiver -------------------------------------------------------------------------
    def frame_room_granted(self) -> None:
        if self._holds is not None:
            self._holds.release(Hold.FRAMES)

    def close_for_stalled_frame(self, size: int, seconds: float) -> None:
        message = (
            f"a packet of {size} bytes stayed incomplete for {seconds:.1f} s while other connections "
            "waited for memory to receive theirs (max_incomplete_frame_bytes)"
        )
        log.warning("%s: closing: %s", self.cnx.remote, message)
        self.cnx.service.frame_closes["stalled"] += 1
        self.size = 0  # frame_room.close_stalled gives the room back
        self.cnx.close_with(ReasonCode.QUOTA_EXCEEDED, message)
