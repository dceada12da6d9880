"""A client that writes and never reads is held back by TCP, not buffered without bound.

Each SEND earns a receipt. When the client does not read them, the broker's writes to it
back up, the broker stops reading that connection, and the client's own writes stall
after a few megabytes. Once the client reads again, every send it completed is receipted.
"""

from __future__ import annotations

import threading
import time

import pytest

from magnetar.protocol import wire

from .support import RawConnection, labelled, send_frame

pytestmark = pytest.mark.slow  # slow: fills the sockets both ways and waits out keepalive intervals

#: What a broker that keeps reading would take from a client that never reads, in this test:
#: far more than the kernel's socket buffers (a few MB on loopback) can hold.
UNBOUNDED = 48 * 1024 * 1024


def send_frames(producer_name: str):
    """SEND frames of a 100-byte message, sequence ids from 0, forever."""
    sequence_id = 0
    while True:
        yield send_frame(1, producer_name, sequence_id, b"m" * 100)
        sequence_id += 1


def write_until_stalled(raw: RawConnection, producer_name: str, stall_s: float) -> tuple[int, int, bytes]:
    """Send without reading until the socket takes nothing for ``stall_s`` (or UNBOUNDED is written).

    Returns (whole frames sent, bytes written, the unsent rest of the frame being written).
    """
    frames = send_frames(producer_name)
    sent = written = 0
    pending = b""
    raw.sock.setblocking(False)
    stalled_since = None
    while written < UNBOUNDED:
        if not pending:
            pending = next(frames)
        try:
            n = raw.sock.send(pending)
        except BlockingIOError:
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > stall_s:
                break  # the broker has stopped reading us
            time.sleep(0.01)  # polling the socket: writable again or not, for ``stall_s``
            continue
        stalled_since = None
        written += n
        pending = pending[n:]
        if not pending:
            sent += 1
    return sent, written, pending


def read_all_receipts(raw: RawConnection, sent: int, pending: bytes) -> list[int]:
    """Read again: the rest of the half-written frame goes out; the receipts' sequence ids."""
    raw.sock.setblocking(True)
    finisher = threading.Thread(target=raw.sock.sendall, args=(pending,))
    finisher.start()
    sent += 1 if pending else 0
    receipts = []
    while len(receipts) < sent:
        frame = raw.expect(wire.BaseCommand.SEND_RECEIPT, timeout=30)
        receipts.append(frame.body().sequence_id)
    finisher.join(10)
    return receipts


def test_a_client_that_does_not_read_is_not_read_and_loses_nothing(broker_factory, client_factory, topic):
    broker = broker_factory({"fsync_policy": "never"})
    raw = RawConnection(broker.port, receive_buffer=4096)
    raw.handshake()
    name = raw.create_producer(topic)
    sent, written, pending = write_until_stalled(raw, name, stall_s=2.0)
    assert written < UNBOUNDED, "the broker kept reading a client that never reads its receipts"
    # The stall is the broker's doing: it stopped reading the connection for its unread writes.
    assert labelled(broker, "magnetar_connection_holds_total", "reason")["writes"] >= 1

    # The broker serves everyone else meanwhile.
    other = client_factory(broker.service_url).create_producer(topic + "-other")
    other.send(b"still served")

    # Every send is receipted once the client reads again.
    assert read_all_receipts(raw, sent, pending) == list(range(sent + (1 if pending else 0)))
    raw.close()


def test_keepalive_does_not_close_a_connection_the_broker_is_not_reading(broker_factory, topic):
    """Its PONG may be waiting unread (as in Pulsar, which skips the check while auto-read is off)."""
    broker = broker_factory({"fsync_policy": "never", "keepalive_interval_seconds": 0.5})
    raw = RawConnection(broker.port, receive_buffer=4096, pong_in_thread=True)
    raw.handshake()
    name = raw.create_producer(topic)
    # Stalled for six keepalive intervals: an unanswered PING closes a connection after two.
    sent, written, pending = write_until_stalled(raw, name, stall_s=3.0)
    assert written < UNBOUNDED
    assert read_all_receipts(raw, sent, pending) == list(range(sent + (1 if pending else 0)))
    raw.close()
