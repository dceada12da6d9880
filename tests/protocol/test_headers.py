"""Checksum and message metadata: ``[0x0e01][crc32c][metadata_size][MessageMetadata][payload]``."""

from __future__ import annotations

import struct

import pytest

from magnetar.protocol import ChecksumMismatch, ProtocolError, wire
from magnetar.protocol.headers import (
    compute_checksum,
    encode_headers_and_payload,
    has_checksum,
    metadata_span,
    parse_metadata,
    verify_checksum,
)

from .support import client_send_payload

PLAIN = client_send_payload("SEND-plain")


def metadata(**fields) -> wire.MessageMetadata:
    return wire.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1_700_000_000_000, **fields)


def test_crc32c_is_castagnoli():
    assert compute_checksum(b"123456789") == 0xE3069283


def test_client_send_carries_a_valid_checksum_and_its_metadata():
    assert has_checksum(PLAIN)
    verify_checksum(PLAIN)
    assert struct.unpack(">I", PLAIN[2:6])[0] == compute_checksum(PLAIN[6:])
    meta, payload = parse_metadata(PLAIN)
    assert meta.producer_name == "plain"
    assert meta.partition_key == "key-1"
    assert meta.event_time == 1_700_000_000_000
    assert [(kv.key, kv.value) for kv in meta.properties] == [("colour", "blue")]
    assert bytes(payload) == b"hello"


@pytest.mark.parametrize("offset", range(2, len(PLAIN)))
def test_any_flipped_byte_after_the_magic_fails_the_checksum(offset):
    corrupt = bytearray(PLAIN)
    corrupt[offset] ^= 0x01
    with pytest.raises(ChecksumMismatch):
        verify_checksum(bytes(corrupt))


def test_checksum_mismatch_is_a_protocol_error():
    assert issubclass(ChecksumMismatch, ProtocolError)


def test_encode_with_checksum_round_trips():
    meta = metadata(partition_key="k", event_time=5)
    encoded = encode_headers_and_payload(meta, b"payload")
    assert encoded[:2] == b"\x0e\x01"
    verify_checksum(encoded)
    parsed, payload = parse_metadata(encoded)
    assert parsed == meta and bytes(payload) == b"payload"


def test_absent_magic_means_no_checksum_to_verify():
    meta = metadata()
    encoded = encode_headers_and_payload(meta, b"payload", checksum=False)
    raw = meta.SerializeToString()
    assert encoded == struct.pack(">I", len(raw)) + raw + b"payload"
    assert not has_checksum(encoded)
    verify_checksum(encoded)  # nothing to check: no error
    parsed, payload = parse_metadata(encoded)
    assert parsed == meta and bytes(payload) == b"payload"


def test_metadata_span_with_and_without_checksum():
    meta = metadata()
    size = len(meta.SerializeToString())
    assert metadata_span(encode_headers_and_payload(meta, b"x")) == (10, 10 + size)
    assert metadata_span(encode_headers_and_payload(meta, b"x", checksum=False)) == (4, 4 + size)


def test_empty_payload():
    parsed, payload = parse_metadata(encode_headers_and_payload(metadata(), b""))
    assert parsed == metadata() and bytes(payload) == b""


def test_magic_without_room_for_the_checksum():
    with pytest.raises(ProtocolError, match="too short"):
        verify_checksum(b"\x0e\x01\x00\x00")


@pytest.mark.parametrize(
    "data", [b"", b"\x00\x00", b"\x0e\x01\x00\x00\x00\x00\x00"], ids=["empty", "short", "crc-only"]
)
def test_too_short_for_the_metadata_size(data):
    with pytest.raises(ProtocolError, match="too short"):
        metadata_span(data)


def test_metadata_size_running_past_the_end():
    encoded = encode_headers_and_payload(metadata(), b"", checksum=False)
    with pytest.raises(ProtocolError, match="runs past the end"):
        parse_metadata(struct.pack(">I", len(encoded)) + encoded[4:])


def test_malformed_metadata():
    with pytest.raises(ProtocolError, match="malformed"):
        parse_metadata(struct.pack(">I", 3) + b"\xff\xff\xff")


def test_metadata_missing_required_fields():
    partial = wire.MessageMetadata(producer_name="p").SerializePartialToString()
    with pytest.raises(ProtocolError, match="missing required"):
        parse_metadata(struct.pack(">I", len(partial)) + partial + b"payload")
