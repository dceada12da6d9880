"""Building blocks of the cursor-ledger formats: varints, packed integer columns, compression.

A *column* is a run of non-negative integers stored at the smallest fixed width
that holds the largest of them (1, 2, 4 or 8 bytes, little-endian), behind one
byte naming the width. Delta-coded ack ranges are mostly small numbers, so a
column is compact before compression and compresses well after; packing and
unpacking run in C (``array``), not one Python step per number.
"""

from __future__ import annotations

import sys
import threading
from array import array

import zstandard

from magnetar.varint import encode, read

_BIG_ENDIAN = sys.byteorder == "big"
WIDTHS = (1, 2, 4, 8)
_TYPECODE_BY_SIZE: dict[int, str] = {}
for _code in "BHILQ":
    _TYPECODE_BY_SIZE.setdefault(array(_code).itemsize, _code)
if not all(width in _TYPECODE_BY_SIZE for width in WIDTHS):  # pragma: no cover - exotic platforms
    raise ImportError("array has no unsigned type of 1, 2, 4 and 8 bytes here")
_LIMITS = tuple((1 << (8 * width)) - 1 for width in WIDTHS)

CODEC_RAW = 0
CODEC_ZSTD = 1
ZSTD_LEVEL = 3

_local = threading.local()


# ------------------------------------------------------------------ varints


def put_varint(out: bytearray, value: int) -> None:
    """Append ``value`` (>= 0) as an unsigned LEB128 varint (``magnetar.varint``, protobuf's)."""
    if value < 0:
        raise ValueError(f"varint of a negative number: {value}")
    out += encode(value)


def get_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read a varint at ``pos``; returns ``(value, next pos)``. Raises ValueError when it runs
    past the end of ``buf`` or past ten bytes (``magnetar.varint.read``)."""
    return read(buf, pos, len(buf))


def zigzag(value: int) -> int:
    return value * 2 if value >= 0 else -value * 2 - 1


def unzigzag(value: int) -> int:
    return value >> 1 if not value & 1 else -((value + 1) >> 1)


# ------------------------------------------------------------------ columns


def put_column(out: bytearray, values: array[int]) -> None:
    """Append ``values`` (non-negative) as ``[u8 width][width * len bytes]``; the count is the caller's."""
    top = max(values) if len(values) else 0
    if len(values) and min(values) < 0:
        raise ValueError("a column holds non-negative numbers only")
    width = next(w for w, limit in zip(WIDTHS, _LIMITS, strict=True) if top <= limit)
    packed = array(_TYPECODE_BY_SIZE[width], values)
    if _BIG_ENDIAN and width > 1:
        packed.byteswap()
    out.append(width)
    out += packed.tobytes()


def get_column(buf: bytes | memoryview, pos: int, count: int, typecode: str = "q") -> tuple[array[int], int]:
    """Read a column of ``count`` values written by ``put_column``; returns ``(array, next pos)``."""
    if pos >= len(buf):
        raise ValueError("column runs past the end")
    width = buf[pos]
    if width not in WIDTHS:
        raise ValueError(f"bad column width {width}")
    start = pos + 1
    end = start + width * count
    if end > len(buf):
        raise ValueError("column runs past the end")
    packed = array(_TYPECODE_BY_SIZE[width])
    packed.frombytes(buf[start:end])
    if _BIG_ENDIAN and width > 1:
        packed.byteswap()
    if packed.typecode == typecode:
        return packed, end
    if typecode == "q" and width == 8 and count and max(packed) >= 1 << 63:
        raise ValueError("column value does not fit in a signed 64-bit integer")
    return array(typecode, packed), end


# -------------------------------------------------------------- compression


def _compressor() -> zstandard.ZstdCompressor:
    compressor = getattr(_local, "compressor", None)
    if compressor is None:
        compressor = _local.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return compressor


def _decompressor() -> zstandard.ZstdDecompressor:
    decompressor = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def compress(body: bytes | bytearray) -> bytes:
    """``[u8 codec][data]``: zstd when that is smaller, the body as is otherwise."""
    squeezed = _compressor().compress(bytes(body))
    if len(squeezed) < len(body):
        return bytes((CODEC_ZSTD,)) + squeezed
    return bytes((CODEC_RAW,)) + bytes(body)


def decompress(data: bytes | memoryview) -> bytes:
    if not len(data):
        raise ValueError("no codec byte")
    codec = data[0]
    if codec == CODEC_RAW:
        return bytes(data[1:])
    if codec == CODEC_ZSTD:
        stream = _decompressor().decompressobj()
        try:
            body = stream.decompress(bytes(data[1:]))
        except zstandard.ZstdError as exc:
            raise ValueError(f"zstd: {exc}") from None
        if not stream.eof or stream.unused_data:
            raise ValueError("zstd frame is torn or followed by stray bytes")
        return body
    raise ValueError(f"unknown codec {codec}")
