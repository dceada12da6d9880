"""Batches: one entry whose (uncompressed) payload is many ``[size u32][SingleMessageMetadata][payload]``."""

from __future__ import annotations

import struct
from collections.abc import Iterator

from google.protobuf.message import DecodeError

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import ProtocolError

_U32 = struct.Struct(">I")


def iter_batch(
    payload: bytes | memoryview, count: int
) -> Iterator[tuple[wire.SingleMessageMetadata, memoryview]]:
    """Yield (single-message metadata, payload) for each of ``count`` messages of a batch."""
    view = memoryview(payload)
    pos = 0
    for _ in range(count):
        if pos + 4 > len(view):
            raise ProtocolError("batch ends before its declared message count")
        (size,) = _U32.unpack_from(view, pos)
        pos += 4
        if pos + size > len(view):
            raise ProtocolError("single message metadata runs past the end of the batch")
        single = wire.SingleMessageMetadata()
        try:
            single.ParseFromString(view[pos : pos + size])
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise ProtocolError(f"malformed single message metadata: {exc}") from None
        if not single.IsInitialized():
            raise ProtocolError("single message metadata is missing required fields")
        pos += size
        end = pos + single.payload_size
        if single.payload_size < 0 or end > len(view):
            raise ProtocolError("message payload runs past the end of the batch")
        yield single, view[pos:end]
        pos = end


def encode_batch(messages: list[tuple[wire.SingleMessageMetadata, bytes]]) -> bytes:
    parts = []
    for single, payload in messages:
        single.payload_size = len(payload)
        raw = single.SerializeToString()
        parts += (_U32.pack(len(raw)), raw, payload)
    return b"".join(parts)
