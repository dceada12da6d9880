"""Payload compression, framed exactly as Pulsar's clients frame each codec.

* LZ4: a raw LZ4 *block* (no frame, no size prefix); the reader learns the size from
  ``uncompressed_size`` in the message metadata.
* ZLIB: a zlib stream (``compress()`` with its 2-byte header and Adler-32 trailer).
* ZSTD: one zstd frame, level 3.
* SNAPPY: raw snappy (not the framed/stream format).

``uncompressed_size`` is always set by the producer; decoding checks the result against it.
"""

from __future__ import annotations

import zlib
from enum import IntEnum

import lz4.block
import snappy
import zstandard

from magnetar.client.errors import ClientError


class CompressionType(IntEnum):
    """Values as the protocol's ``CompressionType`` (and the official client's enum)."""

    NONE = 0
    LZ4 = 1
    ZLIB = 2
    ZSTD = 3
    SNAPPY = 4


class DecompressionError(ClientError):
    """A payload did not decode to its announced size."""


_ZSTD_LEVEL = 3
_zstd_compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
_zstd_decompressor = zstandard.ZstdDecompressor()


def compress(kind: int, data: bytes | memoryview) -> bytes:
    """``data`` encoded with codec ``kind`` (NONE returns it as bytes)."""
    kind = CompressionType(kind)
    if kind is CompressionType.NONE:
        return bytes(data)
    if kind is CompressionType.LZ4:
        return lz4.block.compress(data, store_size=False)
    if kind is CompressionType.ZLIB:
        return zlib.compress(data)
    if kind is CompressionType.ZSTD:
        return _zstd_compressor.compress(data)
    return snappy.compress(bytes(data))


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
    if kind is CompressionType.LZ4:
        if size == 0:
            return b""
        return lz4.block.decompress(data, uncompressed_size=size)
    if kind is CompressionType.ZLIB:
        return zlib.decompress(data)
    if kind is CompressionType.ZSTD:
        return _zstd_decompressor.decompress(data, max_output_size=size)
    return snappy.uncompress(bytes(data))
