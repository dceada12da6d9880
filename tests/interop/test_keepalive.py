"""The broker pings idle connections and closes those that stop answering."""

from __future__ import annotations

import time

import pytest

from magnetar.protocol import FrameDecoder, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import encode_frame

from .support import RawConnection

pytestmark = pytest.mark.interop


def test_silent_connection_is_closed_and_a_responsive_one_stays(broker_factory):
    broker = broker_factory({"keepalive_interval_seconds": 0.5})
    silent = RawConnection(broker.port)
    silent.handshake()
    alive = RawConnection(broker.port)
    alive.handshake()

    # The responsive side answers every PING (RawConnection.recv_frame does) for 2.5 s.
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        try:
            frame = alive.recv_frame(timeout=0.2)
        except TimeoutError:
            continue
        assert frame is not None, "the broker closed a connection that answers its pings"
    alive.send(encode_frame(wrap(wire.CommandPing())))
    assert alive.expect(wire.BaseCommand.PONG)

    # The silent side never answered: it got a PING, then the connection was closed.
    silent.sock.settimeout(1.0)
    decoder = FrameDecoder(1 << 20)
    received = b""
    while chunk := silent.sock.recv(65536):
        received += chunk
    decoder.feed(received)
    types = [frame.type for frame in decoder.frames()]
    assert wire.BaseCommand.PING in types
    silent.close()
    alive.close()
