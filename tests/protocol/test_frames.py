"""FrameDecoder and encode_frame: every fixture whole, byte by byte, with trailing bytes, and the limits."""

from __future__ import annotations

import struct

import pytest

from magnetar.protocol import FrameDecoder, ProtocolError, encode_frame, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import command_type_name, encode_frame_parts, parse_command

from .support import ALL_FRAMES, MAX_FRAME_SIZE, decode_one

NAMES = sorted(ALL_FRAMES)
# Hand-assembled: total 9, command 5, BaseCommand{type: PING (18) = 08 12, ping {} = field 18 -> 92 01 00}.
PING_BYTES = bytes.fromhex("00000009000000050812920100")


def frame_bytes(
    command: bytes, rest: bytes = b"", *, cmd_size: int | None = None, total: int | None = None
) -> bytes:
    cmd_size = len(command) if cmd_size is None else cmd_size
    total = 4 + len(command) + len(rest) if total is None else total
    return struct.pack(">II", total, cmd_size) + command + rest


def reencoded(raw: bytes) -> bytes:
    frame = decode_one(raw)
    return encode_frame(frame.command, frame.payload)


@pytest.mark.parametrize("name", NAMES)
def test_whole_fixture_decodes_to_one_frame_and_reencodes_byte_exact(name):
    raw = ALL_FRAMES[name]
    assert reencoded(raw) == raw


@pytest.mark.parametrize("name", NAMES)
def test_fixture_fed_one_byte_at_a_time(name):
    raw = ALL_FRAMES[name]
    decoder = FrameDecoder(MAX_FRAME_SIZE)
    for byte in raw[:-1]:
        decoder.feed(bytes([byte]))
        assert decoder.next_frame() is None
    decoder.feed(raw[-1:])
    frame = decoder.next_frame()
    assert frame is not None
    assert encode_frame(frame.command, frame.payload) == raw
    assert decoder.next_frame() is None
    assert decoder.buffered == 0


@pytest.mark.parametrize("name", NAMES)
def test_fixture_with_trailing_bytes_leaves_them_buffered(name):
    raw = ALL_FRAMES[name]
    follower = ALL_FRAMES["broker-PING"]
    decoder = FrameDecoder(MAX_FRAME_SIZE)
    decoder.feed(raw + follower[:5])
    frame = decoder.next_frame()
    assert encode_frame(frame.command, frame.payload) == raw
    assert decoder.next_frame() is None
    assert decoder.buffered == 5
    decoder.feed(follower[5:])
    assert decoder.next_frame().type == wire.BaseCommand.PING
    assert decoder.buffered == 0


def test_all_fixtures_back_to_back_come_out_in_order():
    stream = b"".join(ALL_FRAMES[name] for name in NAMES)
    decoder = FrameDecoder(MAX_FRAME_SIZE)
    decoder.feed(stream)
    frames = decoder.frames()
    assert [encode_frame(f.command, f.payload) for f in frames] == [ALL_FRAMES[name] for name in NAMES]
    assert decoder.buffered == 0


def test_ping_matches_hand_assembled_bytes():
    assert encode_frame(wrap(wire.CommandPing())) == PING_BYTES
    frame = decode_one(PING_BYTES)
    assert frame.type == wire.BaseCommand.PING
    assert frame.type_name == "PING"
    assert frame.payload is None


def test_frame_without_payload_has_none_and_with_payload_has_its_bytes():
    send = wrap(wire.CommandSend(producer_id=1, sequence_id=2))
    assert decode_one(encode_frame(send)).payload is None
    assert bytes(decode_one(encode_frame(send, b"\x0e\x01rest")).payload) == b"\x0e\x01rest"


def test_encode_frame_parts_joins_to_encode_frame():
    send = wrap(wire.CommandSend(producer_id=1, sequence_id=2))
    head, payload = encode_frame_parts(send, b"payload-bytes")
    assert head + payload == encode_frame(send, b"payload-bytes")


def test_frames_spread_over_many_feeds_survive_buffer_compaction():
    one = ALL_FRAMES["client-SEND-batched"]
    decoder = FrameDecoder(MAX_FRAME_SIZE)
    seen = 0
    for _ in range(50):
        decoder.feed(one[:7])
        decoder.feed(one[7:])
        frame = decoder.next_frame()
        assert encode_frame(frame.command, frame.payload) == one
        seen += 1
    assert seen == 50 and decoder.buffered == 0


def test_command_type_names():
    assert command_type_name(wire.BaseCommand.SEND) == "SEND"
    assert (
        command_type_name(wire.BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES)
        == "REDELIVER_UNACKNOWLEDGED_MESSAGES"
    )
    assert command_type_name(999) == "UNKNOWN(999)"


def test_body_is_none_for_a_type_without_a_body_field():
    frame = decode_one(encode_frame(wire.BaseCommand(type=wire.BaseCommand.END_TXN)))
    assert frame.type_name == "END_TXN"
    assert frame.body() is None


# -- limits and malformed frames ----------------------------------------------------------------------------


def assert_rejected(
    data: bytes, max_frame_size: int = MAX_FRAME_SIZE, match: str | None = None
) -> FrameDecoder:
    decoder = FrameDecoder(max_frame_size)
    decoder.feed(data)
    with pytest.raises(ProtocolError, match=match):
        decoder.next_frame()
    return decoder


def test_frame_over_the_size_limit_is_rejected_from_its_size_alone():
    assert_rejected(struct.pack(">I", 1025), max_frame_size=1024, match="exceeds the limit")


def test_frame_exactly_at_the_size_limit_is_accepted():
    send = wire.CommandSend(producer_id=1, sequence_id=2)
    command = wrap(send).SerializeToString()
    limit = 4096
    raw = frame_bytes(command, b"x" * (limit - 4 - len(command)))
    assert struct.unpack(">I", raw[:4])[0] == limit
    decoder = FrameDecoder(limit)
    decoder.feed(raw)
    assert len(decoder.next_frame().payload) == limit - 4 - len(command)


def test_oversized_frame_from_the_client_fixture_with_a_small_limit():
    raw = ALL_FRAMES["client-SEND-batched"]
    assert_rejected(raw, max_frame_size=len(raw) - 5, match="exceeds the limit")


@pytest.mark.parametrize("total", [0, 1, 2, 3])
def test_total_size_too_small_for_a_command(total):
    assert_rejected(struct.pack(">I", total) + b"\x00" * 8, match="too small")


def test_zero_command_size():
    assert_rejected(frame_bytes(PING_BYTES[8:], cmd_size=0), match="command size 0")


def test_command_size_larger_than_the_frame():
    command = PING_BYTES[8:]
    assert_rejected(frame_bytes(command, cmd_size=len(command) + 1), match="does not fit")
    assert_rejected(frame_bytes(command, cmd_size=0xFFFFFFFF), match="does not fit")


def test_truncated_command_bytes():
    command = wrap(wire.CommandFlow(consumer_id=1, message_permits=1000)).SerializeToString()
    assert_rejected(frame_bytes(command[:-1]), match="malformed|missing required")


def test_command_size_cutting_a_command_short_leaves_garbage_payload_and_is_rejected():
    command = wrap(wire.CommandProducer(topic="persistent://public/default/t", producer_id=1, request_id=1))
    raw = command.SerializeToString()
    assert_rejected(frame_bytes(raw, cmd_size=len(raw) - 3), match="malformed|missing required")


def test_garbage_command_bytes():
    assert_rejected(frame_bytes(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"), match="malformed")


@pytest.mark.parametrize(
    "command",
    [
        wire.BaseCommand(ping=wire.CommandPing()),  # a body but no type
        wire.BaseCommand(type=wire.BaseCommand.SEND, send=wire.CommandSend(producer_id=1)),  # no sequence_id
        wire.BaseCommand(type=wire.BaseCommand.SUBSCRIBE, subscribe=wire.CommandSubscribe(topic="t")),
        wire.BaseCommand(
            type=wire.BaseCommand.ACK,
            ack=wire.CommandAck(consumer_id=1, ack_type=0, message_id=[wire.MessageIdData(ledger_id=1)]),
        ),
    ],
    ids=["no-type", "send-no-sequence-id", "subscribe-no-subscription", "ack-id-no-entry-id"],
)
def test_command_missing_required_fields(command):
    assert_rejected(frame_bytes(command.SerializePartialToString()), match="missing required")


def test_unknown_command_type_number_is_a_missing_type():
    # Field 1 (type) = 99: proto2 keeps an unknown enum value as an unknown field, so `type` is unset.
    assert_rejected(frame_bytes(b"\x08\x63"), match="missing required")


def test_decoder_is_unusable_after_an_error():
    bad_command = wrap(wire.CommandFlow(consumer_id=1, message_permits=1)).SerializeToString()[:-1]
    decoder = assert_rejected(frame_bytes(bad_command) + PING_BYTES)
    with pytest.raises(ProtocolError):
        decoder.next_frame()
    with pytest.raises(ProtocolError):
        decoder.feed(PING_BYTES)


def test_parse_command_reports_protocol_errors():
    with pytest.raises(ProtocolError):
        parse_command(b"\x08")
    assert parse_command(PING_BYTES[8:]).type == wire.BaseCommand.PING
