"""MQTT's data representations (1.5 in both standards): integers, Variable Byte Integers,
UTF-8 Encoded Strings, Binary Data and String Pairs, read from a packet's body and written.

Reading never goes past the body: a field that claims more bytes than are left is a Malformed
Packet. A string must be well-formed UTF-8 without U+0000 and without UTF-16 surrogates (which
Python's strict decoder already refuses), as both standards say (MQTT-1.5.3-1, -2 in 3.1.1;
MQTT-1.5.4-1, -2 in 5.0); a leading U+FEFF is kept, never stripped (MQTT-1.5.4-3).
"""

from __future__ import annotations

import struct

from magnetar.protocol.mqtt.errors import malformed

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
MAX_UTF8_BYTES = 65_535
MAX_VARINT = 268_435_455


class Reader:
    """A cursor over one packet's body."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, start: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = start
        self.end = len(data) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, size: int, what: str) -> int:
        start = self.pos
        if size > self.end - start:
            raise malformed(f"{what} runs past the end of the packet")
        self.pos = start + size
        return start

    def byte(self, what: str) -> int:
        return self.data[self._take(1, what)]

    def u16(self, what: str) -> int:
        value: int = _U16.unpack_from(self.data, self._take(2, what))[0]
        return value

    def u32(self, what: str) -> int:
        value: int = _U32.unpack_from(self.data, self._take(4, what))[0]
        return value

    def varint(self, what: str) -> int:
        value, self.pos = read_varint(self.data, self.pos, self.end, what)
        return value

    def binary(self, what: str) -> bytes:
        size = self.u16(what)
        start = self._take(size, what)
        return self.data[start : start + size]

    def utf8(self, what: str) -> str:
        size = self.u16(what)
        start = self._take(size, what)
        return decode_utf8(self.data[start : start + size], what)

    def rest(self) -> bytes:
        start, self.pos = self.pos, self.end
        return self.data[start : self.end]


def read_varint(data: bytes | bytearray, pos: int, end: int, what: str) -> tuple[int, int]:
    """A Variable Byte Integer at ``pos`` and the position after it; Malformed if it runs past
    ``end``, into a fifth byte, or uses more bytes than its value needs (MQTT-1.5.5-1; 3.1.1 says
    nothing, and no client writes one: refused in both)."""
    value = 0
    for shift in (0, 7, 14, 21):
        if pos >= end:
            raise malformed(f"{what} runs past the end of the packet")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if byte == 0 and shift:
                raise malformed(f"{what}: a Variable Byte Integer not in its fewest bytes")
            return value, pos
    raise malformed(f"{what}: a Variable Byte Integer of more than four bytes")


def decode_utf8(raw: bytes, what: str) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise malformed(f"{what} is not well-formed UTF-8") from None
    if "\x00" in text:
        raise malformed(f"{what} holds U+0000")
    return text


def varint(value: int) -> bytes:
    if not 0 <= value <= MAX_VARINT:
        raise ValueError(f"{value} does not fit a Variable Byte Integer")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def u16(value: int) -> bytes:
    return _U16.pack(value)


def u32(value: int) -> bytes:
    return _U32.pack(value)


def utf8(text: str) -> bytes:
    """``text`` as an MQTT UTF-8 Encoded String; ValueError for one the standard does not allow."""
    if "\x00" in text:
        raise ValueError("an MQTT string may not hold U+0000")
    raw = text.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError, a ValueError
    if len(raw) > MAX_UTF8_BYTES:
        raise ValueError(f"an MQTT string holds at most {MAX_UTF8_BYTES} bytes, not {len(raw)}")
    return _U16.pack(len(raw)) + raw


def binary(data: bytes) -> bytes:
    if len(data) > MAX_UTF8_BYTES:
        raise ValueError(f"MQTT Binary Data holds at most {MAX_UTF8_BYTES} bytes, not {len(data)}")
    return _U16.pack(len(data)) + bytes(data)
