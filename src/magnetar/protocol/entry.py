"""Broker entry metadata (PIP 70): ``[0x0e02][size u32][BrokerEntryMetadata]``.

The broker may store this in front of the producer's untouched bytes. It is not
covered by the producer's checksum, so adding or stripping it never touches the
message itself.
"""

from __future__ import annotations

import struct

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import ProtocolError, parse_proto
from magnetar.protocol.frames import FrameBuffer

MAGIC_BROKER_ENTRY_METADATA = 0x0E02
_MAGIC_BYTES = MAGIC_BROKER_ENTRY_METADATA.to_bytes(2, "big")
_U32 = struct.Struct(">I")


def prepend_entry_metadata(
    meta: wire.BrokerEntryMetadata, headers_and_payload: bytes | memoryview
) -> bytes | memoryview:
    """``[0x0e02][size][meta]`` in front of the producer's bytes, which are not changed.

    When ``headers_and_payload`` is the payload of a frame the decoder received into a
    ``FrameBuffer``, the metadata is written into the room in front of it and the result
    is a read-only view of that buffer: a large message is not copied again. Otherwise
    the result is new ``bytes``.
    """
    raw = meta.SerializeToString()
    head = _MAGIC_BYTES + _U32.pack(len(raw)) + raw
    room = _room_in_front(headers_and_payload, len(head))
    if room is None:
        return b"".join((head, headers_and_payload))
    buf, start = room
    whole = memoryview(buf)
    whole[start : start + len(head)] = head
    buf.payload_start = -1  # the room is used up: a second call copies
    return whole[start:].toreadonly()


def stored_form(headers_and_payload: bytes | memoryview) -> bytes | memoryview:
    """The producer's bytes to store as they are: a read-only view of a frame's own buffer, else a copy."""
    if isinstance(headers_and_payload, memoryview) and _room_in_front(headers_and_payload, 0) is not None:
        return headers_and_payload.toreadonly()
    return bytes(headers_and_payload)


def _room_in_front(view: bytes | memoryview, need: int) -> tuple[FrameBuffer, int] | None:
    """The FrameBuffer under ``view`` and where ``need`` bytes would start right in front of its
    payload; None if ``view`` is no such payload or the room is not there."""
    if not isinstance(view, memoryview):
        return None
    buf = view.obj
    if type(buf) is not FrameBuffer:
        return None
    payload_start: int = getattr(buf, "payload_start", -1)  # unset until the frame is handed out
    if payload_start < need or len(view) != len(buf) - payload_start:
        return None  # not the payload the decoder handed out, or its room is used
    return buf, payload_start - need


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
    return parse_proto(wire.BrokerEntryMetadata(), view[6:end], "broker entry metadata"), view[end:]


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
