"""Broker entry metadata (PIP 70): ``[0x0e02][u32 size][BrokerEntryMetadata]`` before the producer's bytes."""

from __future__ import annotations

import struct

import pytest

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.entry import prepend_entry_metadata, split_entry_metadata, strip_entry_metadata
from magnetar.protocol.headers import parse_metadata, verify_checksum

from .support import BROKER_FRAMES, client_send_payload, decode_one

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
