"""The producer's bytes: ``[0x0e01][crc32c][metadata_size][MessageMetadata][payload]``.

The broker stores and forwards these bytes untouched; it only peeks at the metadata
(to count messages, find keys, chunk ids, publish time). The CRC32C (Castagnoli)
covers everything from ``metadata_size`` to the end. Clients older than protocol
version 6 send no magic and no checksum.
"""

from __future__ import annotations

import struct

import crc32c

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import ChecksumMismatch, ProtocolError, parse_proto

MAGIC_CRC32C = 0x0E01
_MAGIC_BYTES = MAGIC_CRC32C.to_bytes(2, "big")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def has_checksum(headers_and_payload: bytes | memoryview) -> bool:
    return len(headers_and_payload) >= 2 and headers_and_payload[0] == 0x0E and headers_and_payload[1] == 0x01


def compute_checksum(data: bytes | memoryview) -> int:
    return crc32c.crc32c(data)


def verify_checksum(headers_and_payload: bytes | memoryview) -> None:
    """Raise ChecksumMismatch unless the stored CRC32C matches (no-op without a checksum)."""
    if not has_checksum(headers_and_payload):
        return
    if len(headers_and_payload) < 6:
        raise ProtocolError("message too short to hold its checksum")
    (expected,) = _U32.unpack_from(headers_and_payload, 2)
    actual = crc32c.crc32c(headers_and_payload[6:])
    if actual != expected:
        raise ChecksumMismatch(f"checksum mismatch: stored {expected:#010x}, computed {actual:#010x}")


def metadata_span(headers_and_payload: bytes | memoryview) -> tuple[int, int]:
    """Offsets (start, end) of the serialized MessageMetadata; the payload starts at end."""
    offset = 6 if has_checksum(headers_and_payload) else 0
    if len(headers_and_payload) < offset + 4:
        raise ProtocolError("message too short to hold its metadata size")
    (size,) = _U32.unpack_from(headers_and_payload, offset)
    start = offset + 4
    end = start + size
    if end > len(headers_and_payload):
        raise ProtocolError(f"metadata size {size} runs past the end of the message")
    return start, end


def parse_metadata(headers_and_payload: bytes | memoryview) -> tuple[wire.MessageMetadata, memoryview]:
    """The message metadata and a view of the (possibly compressed, possibly batched) payload."""
    view = memoryview(headers_and_payload)
    start, end = metadata_span(view)
    return parse_proto(wire.MessageMetadata(), view[start:end], "message metadata"), view[end:]


def encode_headers_and_payload(
    metadata: wire.MessageMetadata, payload: bytes | memoryview, *, checksum: bool = True
) -> bytes:
    """Build the producer's bytes for a message (used by our client and by tests)."""
    meta = metadata.SerializeToString()
    body = b"".join((_U32.pack(len(meta)), meta, payload))
    if not checksum:
        return body
    return b"".join((_MAGIC_BYTES, _U32.pack(crc32c.crc32c(body)), body))
