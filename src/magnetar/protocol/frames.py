"""Framing: turning a byte stream into commands and commands into bytes.

Wire layout (all integers big-endian):

    simple command:  [total_size u32][command_size u32][BaseCommand]
    with a payload:  [total_size u32][command_size u32][BaseCommand][headers_and_payload]

``total_size`` excludes its own four bytes. For SEND and MESSAGE the bytes after the
command are the producer's untouched ``[0x0e01][crc32c][metadata_size][metadata][payload]``
(possibly preceded by broker entry metadata, see ``entry.py``); the decoder hands them
out as a memoryview without copying or interpreting them.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from google.protobuf.message import DecodeError

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import ProtocolError

_U32 = struct.Struct(">I")
_HEADER = struct.Struct(">II")

#: Room a frame may take beyond the largest message: the command and headers.
FRAME_OVERHEAD = 10 * 1024

_TYPE_NAMES: dict[int, str] = {number: name for name, number in wire.BaseCommand.Type.items()}
#: Field of BaseCommand holding each command type's body (None where we define no body).
_BODY_FIELD: dict[int, str | None] = {}
for _number, _name in _TYPE_NAMES.items():
    _field = _name.lower()
    _BODY_FIELD[_number] = _field if _field in wire.BaseCommand.DESCRIPTOR.fields_by_name else None


def command_type_name(cmd_type: int) -> str:
    """The protocol's name for a command type number, e.g. ``SEND`` for 6."""
    return _TYPE_NAMES.get(cmd_type, f"UNKNOWN({cmd_type})")


class Frame(NamedTuple):
    """One decoded frame: the command envelope and, for SEND/MESSAGE, the bytes after it.

    A named tuple rather than a frozen dataclass: one is made per frame, and a frozen
    dataclass's ``__init__`` sets each field through ``object.__setattr__``.
    """

    command: wire.BaseCommand
    payload: memoryview | None = None

    @property
    def type(self) -> int:
        return self.command.type

    @property
    def type_name(self) -> str:
        return command_type_name(self.command.type)

    def body(self):
        """The type-specific command message (e.g. ``CommandSend``), or None if unknown to us."""
        field = _BODY_FIELD.get(self.command.type)
        if field is None:
            return None
        return getattr(self.command, field)


class FrameDecoder:
    """Incremental frame decoder: ``feed`` bytes, then call ``next_frame`` until it returns None.

    Raises ProtocolError for anything that cannot be a valid frame: a size above the
    limit, a command size that does not fit, an unparsable or incomplete command.
    After an error the decoder is unusable, like the stream it came from.
    """

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self._broken = False

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._broken:
            raise ProtocolError("decoder used after a protocol error")
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_frame(self) -> Frame | None:
        """Return the next complete frame, or None when more bytes are needed."""
        if self._broken:
            raise ProtocolError("decoder used after a protocol error")
        try:
            return self._next_frame()
        except ProtocolError:
            self._broken = True
            raise

    def frames(self) -> list[Frame]:
        """All complete frames buffered now."""
        out = []
        while (frame := self.next_frame()) is not None:
            out.append(frame)
        return out

    def _next_frame(self) -> Frame | None:
        buf, pos = self._buf, self._pos
        available = len(buf) - pos
        if available < 4:
            return None
        (total,) = _U32.unpack_from(buf, pos)
        if total > self.max_frame_size:
            raise ProtocolError(f"frame of {total} bytes exceeds the limit of {self.max_frame_size}")
        if total < 4:
            raise ProtocolError(f"frame size {total} is too small to hold a command")
        if available < 4 + total:
            return None
        (cmd_size,) = _U32.unpack_from(buf, pos + 4)
        if cmd_size == 0 or cmd_size > total - 4:
            raise ProtocolError(f"command size {cmd_size} does not fit in a frame of {total}")
        # One copy out of the buffer (slicing the bytearray first would be a second one); the
        # temporary view is gone before the buffer is next resized.
        frame_bytes = bytes(memoryview(buf)[pos + 8 : pos + 4 + total])
        self._pos = pos + 4 + total
        view = memoryview(frame_bytes)
        command = parse_command(view[:cmd_size])
        payload = view[cmd_size:] if cmd_size < len(view) else None
        return Frame(command, payload)


def parse_command(data: bytes | memoryview) -> wire.BaseCommand:
    """Parse a BaseCommand, turning every decoding failure into a ProtocolError."""
    command = wire.BaseCommand()
    try:
        command.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ProtocolError(f"malformed command: {exc}") from None
    if not command.IsInitialized():
        raise ProtocolError(
            "command is missing required fields: " + ", ".join(command.FindInitializationErrors())
        )
    return command


def encode_frame(command: wire.BaseCommand, payload: bytes | memoryview | None = None) -> bytes:
    """Serialize a command (and optional headers-and-payload bytes) into one frame."""
    cmd = command.SerializeToString()
    if payload is None:
        return _HEADER.pack(len(cmd) + 4, len(cmd)) + cmd
    return b"".join((_HEADER.pack(len(cmd) + 4 + len(payload), len(cmd)), cmd, payload))


def encode_frame_parts(
    command: wire.BaseCommand, payload: bytes | memoryview
) -> tuple[bytes, bytes | memoryview]:
    """Like encode_frame, but leaves a large payload uncopied: write both parts in order."""
    cmd = command.SerializeToString()
    return _HEADER.pack(len(cmd) + 4 + len(payload), len(cmd)) + cmd, payload
