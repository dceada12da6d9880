"""Broker entry metadata (PIP 70): ``[0x0e02][size u32][BrokerEntryMetadata]``.

The broker may store this in front of the producer's untouched bytes. It is not
covered by the producer's checksum, so adding or stripping it never touches the
message itself.
"""

from __future__ import annotations

import struct

from google.protobuf.message import DecodeError

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import ProtocolError

MAGIC_BROKER_ENTRY_METADATA = 0x0E02
_MAGIC_BYTES = MAGIC_BROKER_ENTRY_METADATA.to_bytes(2, "big")
_U32 = struct.Struct(">I")


def prepend_entry_metadata(meta: wire.BrokerEntryMetadata, headers_and_payload: bytes | memoryview) -> bytes:
    raw = meta.SerializeToString()
    return b"".join((_MAGIC_BYTES, _U32.pack(len(raw)), raw, headers_and_payload))


def split_entry_metadata(
    entry: bytes | memoryview,
) -> tuple[wire.BrokerEntryMetadata | None, memoryview]:
    """Separate broker entry metadata (None when absent) from the producer's bytes."""
    view = memoryview(entry)
    if bytes(view[:2]) != _MAGIC_BYTES:
        return None, view
    if len(view) < 6:
        raise ProtocolError("entry too short to hold broker entry metadata")
    (size,) = _U32.unpack_from(view, 2)
    end = 6 + size
    if end > len(view):
        raise ProtocolError(f"broker entry metadata size {size} runs past the end of the entry")
    meta = wire.BrokerEntryMetadata()
    try:
        meta.ParseFromString(view[6:end])
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ProtocolError(f"malformed broker entry metadata: {exc}") from None
    return meta, view[end:]


def strip_entry_metadata(entry: bytes | memoryview) -> memoryview:
    """The producer's bytes of a stored entry, without any broker entry metadata."""
    view = memoryview(entry)
    if bytes(view[:2]) != _MAGIC_BYTES:
        return view
    if len(view) < 6:
        raise ProtocolError("entry too short to hold broker entry metadata")
    (size,) = _U32.unpack_from(view, 2)
    if 6 + size > len(view):
        raise ProtocolError(f"broker entry metadata size {size} runs past the end of the entry")
    return view[6 + size :]
