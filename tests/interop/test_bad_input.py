"""Bad bytes from a raw socket: the broker rejects them; an official client beside it notices nothing."""

from __future__ import annotations

import socket
import struct

import pulsar
import pytest
from pulsar.exceptions import MessageTooBig

from magnetar.protocol import encode_frame, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.headers import encode_headers_and_payload

from .support import RawConnection, assert_next_is_marker, read_stored, receive_n

pytestmark = pytest.mark.interop

BASE = wire.BaseCommand


def assert_closed_without_receipts(raw: RawConnection) -> None:
    frames = raw.expect_closed()
    assert all(f.type == BASE.ERROR for f in frames), [f.command for f in frames]


# -- scenarios: each drives the raw connection, checks the broker's answer, returns what it stored


def garbage_before_connect(raw: RawConnection, topic: str) -> list[bytes]:
    raw.send(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert_closed_without_receipts(raw)
    return []


def garbage_after_connect(raw: RawConnection, topic: str) -> list[bytes]:
    raw.handshake()
    raw.send(b"\xde\xad\xbe\xef" * 64)
    assert_closed_without_receipts(raw)
    return []


def unparsable_command(raw: RawConnection, topic: str) -> list[bytes]:
    raw.handshake()
    raw.send(struct.pack(">II", 10, 6) + b"\xff" * 6)
    assert_closed_without_receipts(raw)
    return []


def truncated_command(raw: RawConnection, topic: str) -> list[bytes]:
    raw.handshake()
    command = wrap(wire.CommandProducer(topic=topic, producer_id=1, request_id=1)).SerializeToString()[:-4]
    raw.send(struct.pack(">II", len(command) + 4, len(command)) + command)
    assert_closed_without_receipts(raw)
    return []


def truncated_frame(raw: RawConnection, topic: str) -> list[bytes]:
    raw.handshake()
    name = raw.create_producer(topic)
    meta = wire.MessageMetadata(producer_name=name, sequence_id=0, publish_time=1)
    frame = encode_frame(
        wrap(wire.CommandSend(producer_id=1, sequence_id=0)),
        encode_headers_and_payload(meta, b"never-complete"),
    )
    raw.send(frame[: len(frame) - 5])
    raw.sock.shutdown(socket.SHUT_WR)  # the frame never completes
    assert_closed_without_receipts(raw)
    return []


def oversized_frame(raw: RawConnection, topic: str) -> list[bytes]:
    raw.handshake()
    raw.send(struct.pack(">II", 100 * 1024 * 1024, 20) + b"\x00" * 20)
    assert_closed_without_receipts(raw)
    return []


def bad_checksum(raw: RawConnection, topic: str) -> list[bytes]:
    raw.handshake()
    name = raw.create_producer(topic)
    for seq in range(4):
        good = seq % 2 == 1
        raw.send_message(1, name, seq, b"raw-%d" % seq, corrupt_checksum=not good)
        if good:
            receipt = raw.expect(BASE.SEND_RECEIPT).body()
            assert (receipt.producer_id, receipt.sequence_id) == (1, seq)
        else:
            error = raw.expect(BASE.SEND_ERROR).body()
            assert (error.producer_id, error.sequence_id, error.error) == (1, seq, wire.ChecksumError)
    raw.send_command(wire.CommandPing())
    raw.expect(BASE.PONG)  # the connection is still in business
    return [b"raw-1", b"raw-3"]


def unknown_producer(raw: RawConnection, topic: str) -> list[bytes]:
    raw.handshake()
    raw.send_message(4242, "nobody", 0, b"orphan")
    frame = raw.recv_frame()
    assert frame is None or frame.type == BASE.ERROR, frame.command
    return []


SCENARIOS = [
    garbage_before_connect,
    garbage_after_connect,
    unparsable_command,
    truncated_command,
    truncated_frame,
    oversized_frame,
    bad_checksum,
    unknown_producer,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_bad_input_is_rejected_and_other_clients_carry_on(broker, client, client_factory, topic, scenario):
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "witness", initial_position=pulsar.InitialPosition.Earliest)
    before = [b"before-%d" % i for i in range(5)]
    for payload in before:
        producer.send(payload)
    assert [m.data() for m in receive_n(consumer, 5, ack=True)] == before

    raw = RawConnection(broker.port)
    try:
        stored_by_raw = scenario(raw, topic)
    finally:
        raw.close()
    assert broker.running, broker.log_tail()

    after = [b"after-%d" % i for i in range(5)]
    for payload in after:
        producer.send(payload)
    assert [m.data() for m in receive_n(consumer, 5 + len(stored_by_raw), ack=True)] == stored_by_raw + after
    assert_next_is_marker(consumer, producer)

    fresh = client_factory(broker.service_url)
    reader = fresh.create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in read_stored(reader)] == before + stored_by_raw + after + [b"marker"]


def test_configured_max_message_size_is_announced_and_enforced(broker_factory, client_factory, topic):
    limit = 1024 * 1024
    broker = broker_factory({"max_message_size": limit})
    raw = RawConnection(broker.port)
    try:
        assert raw.handshake().max_message_size == limit
        name = raw.create_producer(topic)
        raw.send_message(1, name, 0, b"x" * (2 * limit))
        assert_closed_without_receipts(raw)
    finally:
        raw.close()

    client = client_factory(broker.service_url)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    with pytest.raises(MessageTooBig):  # the client checks against the size CONNECTED announced
        producer.send(b"x" * (limit + 1))
    big = bytes(range(256)) * ((limit - 4096) // 256)
    producer.send(big)
    assert consumer.receive(5000).data() == big
    assert_next_is_marker(consumer, producer)
