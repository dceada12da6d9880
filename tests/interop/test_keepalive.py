"""The broker pings idle connections and closes those that stop answering."""

from __future__ import annotations

import threading

import pytest

from magnetar.protocol import FrameDecoder, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import encode_frame

from .support import RawConnection

pytestmark = pytest.mark.interop


@pytest.mark.slow
def test_silent_connection_is_closed_and_a_responsive_one_stays(broker_factory):
    broker = broker_factory({"keepalive_interval_seconds": 0.5})
    silent = RawConnection(broker.port)
    silent.handshake()
    silent.sock.settimeout(30)  # a bound on a failure: the broker closes it within two intervals
    alive = RawConnection(broker.port)
    alive.handshake()

    # The silent side reads (and never answers) until the broker closes it.
    received = bytearray()
    closed = threading.Event()
    errors: list[OSError] = []

    def read_silent() -> None:
        try:
            while chunk := silent.sock.recv(65536):
                received.extend(chunk)
        except OSError as exc:  # a timeout: never closed
            errors.append(exc)
        finally:
            closed.set()

    threading.Thread(target=read_silent, daemon=True).start()
    # Meanwhile the responsive side answers every PING (RawConnection.recv_frame does), as long
    # as the broker takes to close the silent one: the same pings, the same time.
    while not closed.is_set():
        try:
            frame = alive.recv_frame(timeout=0.2)
        except TimeoutError:
            continue
        assert frame is not None, "the broker closed a connection that answers its pings"
    assert not errors, f"the silent connection was not closed: {errors}"
    alive.send(encode_frame(wrap(wire.CommandPing())))
    assert alive.expect(wire.BaseCommand.PONG)

    # The silent side never answered: it got a PING, then the connection was closed.
    decoder = FrameDecoder(1 << 20)
    decoder.feed(bytes(received))
    types = [frame.type for frame in decoder.frames()]
    assert wire.BaseCommand.PING in types
    silent.close()
    alive.close()
