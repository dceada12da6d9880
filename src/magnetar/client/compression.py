"""Payload compression for the client: the codec lives in the protocol layer (the broker uses it
too); the client raises its own ``DecompressionError``, a ``ClientError``."""

from __future__ import annotations

from magnetar.client.errors import ClientError
from magnetar.protocol import compression as _codec
from magnetar.protocol.compression import CompressionType, compress

__all__ = ["CompressionType", "DecompressionError", "compress", "decompress"]


class DecompressionError(ClientError):
    """A payload did not decode to its announced size."""


def decompress(kind: int, data: bytes | bytearray | memoryview, uncompressed_size: int) -> bytes:
    """Decode ``data``; raises DecompressionError unless it yields ``uncompressed_size`` bytes."""
    if isinstance(data, bytearray):  # an assembled chunked message: read in place, not copied
        data = memoryview(data)
    try:
        return _codec.decompress(kind, data, uncompressed_size)
    except _codec.DecompressionError as exc:
        raise DecompressionError(str(exc)) from None
