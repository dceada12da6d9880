"""Broker entry metadata (PIP 70): ``[0x0e02][u32 size][BrokerEntryMetadata]`` before the producer's bytes."""

from __future__ import annotations

import struct

import pytest

from magnetar.protocol import FrameDecoder, ProtocolError, encode_frame, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.entry import (
    prepend_entry_metadata,
    split_entry_metadata,
    stored_form,
    strip_entry_metadata,
)
from magnetar.protocol.frames import FrameBuffer
from magnetar.protocol.headers import parse_metadata, verify_checksum

from .support import BROKER_FRAMES, MAX_FRAME_SIZE, client_send_payload, decode_one

PRODUCER_BYTES = client_send_payload("SEND-plain")
META = wire.BrokerEntryMetadata(broker_timestamp=1_700_000_000_123, index=41)


def test_prepend_layout_is_byte_exact():
    raw = META.SerializeToString()
    entry = prepend_entry_metadata(META, PRODUCER_BYTES)
    assert entry == b"\x0e\x02" + struct.pack(">I", len(raw)) + raw + PRODUCER_BYTES
    # ...and the producer's part keeps its own [0x0e01][crc][size][meta][payload] untouched.
    assert entry[6 + len(raw) : 6 + len(raw) + 2] == b"\x0e\x01"


def test_split_returns_the_metadata_and_the_untouched_producer_bytes():
    meta, rest = split_entry_metadata(prepend_entry_metadata(META, PRODUCER_BYTES))
    assert meta == META
    assert bytes(rest) == PRODUCER_BYTES
    verify_checksum(rest)
    assert bytes(parse_metadata(rest)[1]) == b"hello"


def test_strip_returns_the_untouched_producer_bytes():
    assert bytes(strip_entry_metadata(prepend_entry_metadata(META, PRODUCER_BYTES))) == PRODUCER_BYTES


def test_empty_entry_metadata_still_has_its_header():
    entry = prepend_entry_metadata(wire.BrokerEntryMetadata(), PRODUCER_BYTES)
    assert entry[:6] == b"\x0e\x02\x00\x00\x00\x00"
    meta, rest = split_entry_metadata(entry)
    assert meta == wire.BrokerEntryMetadata() and bytes(rest) == PRODUCER_BYTES


def test_entry_without_broker_metadata_passes_through():
    meta, rest = split_entry_metadata(PRODUCER_BYTES)
    assert meta is None and bytes(rest) == PRODUCER_BYTES
    assert bytes(strip_entry_metadata(PRODUCER_BYTES)) == PRODUCER_BYTES


def test_message_frame_carries_entry_metadata_between_command_and_checksum():
    frame = decode_one(BROKER_FRAMES["broker-MESSAGE-entry-metadata"])
    assert frame.type == wire.BaseCommand.MESSAGE
    assert bytes(frame.payload[:2]) == b"\x0e\x02"
    meta, rest = split_entry_metadata(frame.payload)
    assert meta.index == 41 and meta.broker_timestamp == 1_700_000_000_123
    assert bytes(rest) == PRODUCER_BYTES


@pytest.mark.parametrize("entry", [b"\x0e\x02", b"\x0e\x02\x00\x00\x00"], ids=["magic-only", "short-size"])
def test_too_short_for_the_size(entry):
    with pytest.raises(ProtocolError, match="too short"):
        split_entry_metadata(entry)
    with pytest.raises(ProtocolError, match="too short"):
        strip_entry_metadata(entry)


def test_size_running_past_the_end():
    entry = b"\x0e\x02" + struct.pack(">I", 100) + META.SerializeToString()
    with pytest.raises(ProtocolError, match="runs past the end"):
        split_entry_metadata(entry)
    with pytest.raises(ProtocolError, match="runs past the end"):
        strip_entry_metadata(entry)


def test_malformed_entry_metadata():
    with pytest.raises(ProtocolError, match="malformed"):
        split_entry_metadata(b"\x0e\x02" + struct.pack(">I", 2) + b"\xff\xff" + PRODUCER_BYTES)


# -- entry metadata written in front of a large frame's payload, without copying it ---------------------


def received_payload(size: int = 200_000) -> memoryview:
    """The payload of a large SEND as the decoder hands it out: a view of the frame's own buffer."""
    body = PRODUCER_BYTES + bytes(i % 251 for i in range(size))
    raw = encode_frame(wrap(wire.CommandSend(producer_id=1, sequence_id=1)), body)
    decoder = FrameDecoder(MAX_FRAME_SIZE)
    decoder.feed(raw[: len(raw) // 2])  # a large frame still coming moves to a buffer of its own
    assert decoder.next_frame() is None
    decoder.feed(raw[len(raw) // 2 :])
    payload = decoder.next_frame().payload
    assert type(payload.obj) is FrameBuffer and bytes(payload) == body
    return payload


def test_prepend_into_a_frame_buffer_writes_in_front_of_the_payload_without_copying_it():
    payload = received_payload()
    expected = prepend_entry_metadata(META, bytes(payload))
    entry = prepend_entry_metadata(META, payload)
    assert isinstance(entry, memoryview) and entry.readonly
    assert entry.obj is payload.obj  # the buffer the socket was read into
    assert entry == expected
    assert bytes(strip_entry_metadata(entry)) == bytes(payload)


def test_the_room_in_front_is_used_once_then_prepend_copies():
    payload = received_payload()
    first = prepend_entry_metadata(META, payload)
    kept = bytes(first)
    other = wire.BrokerEntryMetadata(broker_timestamp=1, index=2)
    second = prepend_entry_metadata(other, payload)
    assert isinstance(second, bytes) and second == prepend_entry_metadata(other, bytes(payload))
    assert first == kept  # the first entry was not overwritten


def test_only_the_whole_payload_of_a_frame_buffer_is_written_in_front_of():
    payload = received_payload()
    for view in (payload[1:], payload[:-1], memoryview(bytearray(payload))):
        entry = prepend_entry_metadata(META, view)
        assert isinstance(entry, bytes) and entry == prepend_entry_metadata(META, bytes(view))
    assert isinstance(prepend_entry_metadata(META, payload), memoryview)  # the room is still there


def test_stored_form_keeps_a_frame_buffer_payload_and_copies_anything_else():
    payload = received_payload()
    kept = stored_form(payload)
    assert isinstance(kept, memoryview) and kept.readonly and kept.obj is payload.obj and kept == payload
    mutable = bytearray(PRODUCER_BYTES)
    copied = stored_form(memoryview(mutable))
    mutable[0] ^= 0xFF
    assert copied == PRODUCER_BYTES
