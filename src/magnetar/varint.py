"""Base-128 varints (protobuf's, LEB128 unsigned), read and written without protobuf.

One encoding, one copy, for the per-message frames written by hand (``protocol/hot_frames``), the
batch metadata read by hand (``protocol/batch``), the cursor ledger's own entries
(``storage/ack_codec``) and the broker's MQTT packet lengths. The protocol and storage know
nothing of each other, so it sits below both. MQTT's Variable Byte Integer is this encoding with
stricter rules for a reader (at most four bytes, in the fewest bytes): ``protocol/mqtt/primitives``
reads it.
"""

from __future__ import annotations

#: Protobuf's longest varint: a uint64, or a negative int32/int64 (written as its 64-bit value).
MAX_BYTES = 10
_LONGEST = 7 * MAX_BYTES  # the shift past a tenth byte that was not the last

_SMALL = [bytes([n]) for n in range(128)]


def encode(value: int) -> bytes:
    """``value`` (>= 0, not checked: pass a negative int64 as ``value % 2**64``) as a varint; also
    MQTT's Variable Byte Integer (1.5.5) of a value below 2**28."""
    if value < 128:
        return _SMALL[value]
    if value < 0x4000:  # sequence ids and packet lengths mostly: two or three bytes, no loop
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value < 0x20_0000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read(buf: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``buf[pos]`` and the position after it. ValueError when it runs past ``end``
    or past ``MAX_BYTES`` bytes, as protobuf refuses it: a reader without protobuf must not take
    what protobuf would not."""
    value = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        if byte < 0x80:
            return value | byte << shift, pos
        value |= (byte & 0x7F) << shift
        shift += 7
        if shift == _LONGEST:
            raise ValueError(f"varint longer than {MAX_BYTES} bytes")
    raise ValueError("varint runs past the end")
