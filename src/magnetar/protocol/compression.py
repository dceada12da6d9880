"""Payload compression, framed exactly as Pulsar's clients frame each codec.

* LZ4: a raw LZ4 *block* (no frame, no size prefix); the reader learns the size from
  ``uncompressed_size`` in the message metadata.
* ZLIB: a zlib stream (``compress()`` with its 2-byte header and Adler-32 trailer).
* ZSTD: one zstd frame, level 3.
* SNAPPY: raw snappy (not the framed/stream format).

``uncompressed_size`` is always set by the producer; decoding checks the result against it.

Sans-IO and shared: the client compresses and decompresses with it, the broker decompresses
a batch to check its structure before storing it (``batch.check_batch``).
"""

from __future__ import annotations

import zlib
from enum import IntEnum

import lz4.block
import snappy
import zstandard

from magnetar.protocol.errors import ProtocolError


class CompressionType(IntEnum):
    """Values as the protocol's ``CompressionType`` (and the official client's enum)."""

    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4


class DecompressionError(ProtocolError):
    """A payload did not decode to its announced size (local to one message, as a bad checksum is)."""


_ZSTD_LEVEL = 3
_zstd_compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
_zstd_decompressor = zstandard.ZstdDecompressor()


def compress(kind: int, data: bytes | memoryview) -> bytes:
    """``data`` encoded with codec ``kind`` (NONE returns it as bytes)."""
    kind = CompressionType(kind)
    if kind is CompressionType.NONE:
        return bytes(data)
    if kind is CompressionType.LZ4:
        packed: bytes = lz4.block.compress(data, store_size=False)
        return packed
    if kind is CompressionType.ZLIB:
        return zlib.compress(data)
    if kind is CompressionType.ZSTD:
        return _zstd_compressor.compress(data)
    snapped: bytes = snappy.compress(bytes(data))
    return snapped


def decompress(kind: int, data: bytes | memoryview, uncompressed_size: int) -> bytes:
    """Decode ``data``; raises DecompressionError unless it yields ``uncompressed_size`` bytes."""
    try:
        kind = CompressionType(kind)
    except ValueError:
        raise DecompressionError(f"unknown compression type {kind}") from None
    if kind is CompressionType.NONE:
        return bytes(data)
    try:
        out = _decode(kind, data, uncompressed_size)
    except DecompressionError:
        raise
    except (lz4.block.LZ4BlockError, zlib.error, zstandard.ZstdError, snappy.UncompressError) as exc:
        raise DecompressionError(f"{kind.name} payload does not decode: {exc}") from None
    except Exception as exc:  # codecs raise assorted errors on garbage
        raise DecompressionError(f"{kind.name} payload does not decode: {exc!r}") from None
    if len(out) != uncompressed_size:
        raise DecompressionError(
            f"{kind.name} payload decoded to {len(out)} bytes, metadata says {uncompressed_size}"
        )
    return out


def _decode(kind: CompressionType, data: bytes | memoryview, size: int) -> bytes:
    """Decode, never producing (or allocating) much more than ``size`` bytes: the broker decodes
    what any peer sends, so a small payload must not unpack into gigabytes."""
    if kind is CompressionType.LZ4:
        if size == 0:
            return b""
        unpacked: bytes = lz4.block.decompress(data, uncompressed_size=size)
        return unpacked
    if kind is CompressionType.ZLIB:
        inflater = zlib.decompressobj()
        out = inflater.decompress(data, size + 1)
        if len(out) == size and not inflater.eof:
            raise DecompressionError(f"ZLIB payload is longer than the {size} bytes metadata says")
        return out
    if kind is CompressionType.ZSTD:
        declared = zstandard.frame_content_size(data)
        if declared >= 0 and declared != size:
            raise DecompressionError(f"ZSTD frame holds {declared} bytes, metadata says {size}")
        return _zstd_decompressor.decompress(data, max_output_size=size)
    declared = _snappy_length(data)
    if declared != size:
        raise DecompressionError(f"SNAPPY payload holds {declared} bytes, metadata says {size}")
    unsnapped: bytes = snappy.uncompress(bytes(data))
    return unsnapped


def _snappy_length(data: bytes | memoryview) -> int:
    """The uncompressed length raw snappy declares up front (a varint of at most 5 bytes)."""
    length = 0
    for shift, byte in zip(range(0, 35, 7), bytes(data[:5]), strict=False):
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            return length
    raise DecompressionError("SNAPPY payload has no valid length header")
