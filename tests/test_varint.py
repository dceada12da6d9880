"""``magnetar.varint``, the one base-128 varint of the protocol and storage, against protobuf's own:
the same bytes for every value, the same values read, and refused where protobuf refuses."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import example, given
from hypothesis import strategies as st

from magnetar.protocol import wire
from magnetar.varint import MAX_BYTES, encode, read

_U64 = 1 << 64
#: Tags of SingleMessageMetadata's sequence_id (8, uint64) and payload_size (3, int32), varints both.
_SEQUENCE_ID, _PAYLOAD_SIZE = b"\x40", b"\x18"


def protobuf_reads(varint: bytes) -> int | None:
    """What protobuf reads from ``varint`` as a uint64 field; None when it refuses it."""
    single = wire.SingleMessageMetadata()
    try:
        single.ParseFromString(_SEQUENCE_ID + varint)  # required fields unchecked here
    except DecodeError:
        return None
    return single.sequence_id


@given(st.integers(0, _U64 - 1))
@example(0)
@example(127)
@example(128)
@example(0x3FFF)
@example(0x4000)
@example(0x1F_FFFF)
@example(0x20_0000)
@example(_U64 - 1)
def test_a_uint64_is_written_and_read_as_protobuf_writes_it(value):
    written = wire.SingleMessageMetadata(sequence_id=value).SerializePartialToString()
    assert _SEQUENCE_ID + encode(value) == written
    assert read(written, 1, len(written)) == (value, len(written))


@given(st.integers(-(1 << 31), (1 << 31) - 1))
def test_a_negative_int32_is_its_64_bit_value_in_ten_bytes(value):
    written = wire.SingleMessageMetadata(payload_size=value).SerializeToString()
    assert _PAYLOAD_SIZE + encode(value % _U64) == written
    assert read(written, 1, len(written)) == (value % _U64, len(written))
    assert value >= 0 or len(written) == 1 + MAX_BYTES


@given(st.binary(max_size=MAX_BYTES + 2))
@example(b"")
@example(b"\x80" * 9 + b"\x7f")  # ten bytes, more than 64 bits: protobuf keeps the low 64
@example(b"\x80" * 10 + b"\x00")  # eleven bytes
@example(b"\x80\x00")  # not in its fewest bytes: protobuf takes it
def test_any_bytes_are_read_or_refused_as_protobuf_reads_or_refuses_them(data):
    try:
        value, end = read(data, 0, len(data))
    except ValueError:
        assert protobuf_reads(data) is None
        return
    assert all(byte >= 0x80 for byte in data[: end - 1]) and data[end - 1] < 0x80
    assert protobuf_reads(data[:end]) == value % _U64


@given(st.binary(max_size=4), st.binary(max_size=MAX_BYTES + 1), st.binary(max_size=4))
def test_a_varint_is_read_where_it_is_and_never_past_its_end(before, data, after):
    """``pos`` and ``end`` bound the read: what lies around the varint changes nothing."""
    buffer = before + data + after
    try:
        expected = read(data, 0, len(data))
    except ValueError:
        with pytest.raises(ValueError):
            read(buffer, len(before), len(before) + len(data))
        return
    assert read(buffer, len(before), len(before) + len(data)) == (expected[0], len(before) + expected[1])
    assert read(memoryview(buffer), len(before), len(before) + len(data)) == (
        expected[0],
        len(before) + expected[1],
    )
