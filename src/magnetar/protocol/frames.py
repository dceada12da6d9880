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
from typing import Any, NamedTuple, Protocol

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import ProtocolError, parse_proto
from magnetar.protocol.hot_acks import HotAck, HotMessage, read_ack, read_message

_U32 = struct.Struct(">I")
#: A BaseCommand's first bytes when it is an ACK (type = 10).
_ACK_TYPE = b"\x08\x0a"
#: ... a MESSAGE (type = 9).
_MESSAGE_TYPE = b"\x08\x09"
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

    def body(self) -> Any:
        """The type-specific command message (e.g. ``CommandSend``), or None if unknown to us.

        ``Any``: which message it is follows from the frame's type at run time, and each caller
        reads the fields of the one its type test chose."""
        field = _BODY_FIELD.get(self.command.type)
        if field is None:
            return None
        return getattr(self.command, field)


#: A frame of at least this many bytes that is not complete yet is received into a buffer of
#: its own, which then backs the frame handed out: the rest of it is read in place, and its
#: payload is not copied again in user space.
LARGE_FRAME = 64 * 1024
#: ... once more than this fraction (1/N) of it has come: a size field alone does not make
#: the broker set aside megabytes (at most N times what a peer really sent).
LARGE_FRAME_SHARE = 8
#: Spare bytes in front of a large frame in its own buffer: with the size field and the command
#: (parsed, then dead) they take the broker entry metadata, so the payload need not move.
FRAME_HEADROOM = 64
#: Room a read gets in the decoder's own buffer when there is no shared buffer.
OWN_READ_SIZE = 64 * 1024
#: The smallest read into a connection's own buffer.
MIN_READ_SIZE = 1024
#: Size of a shared read buffer: one per event loop, lent to each connection's read in turn.
SHARED_READ_SIZE = 256 * 1024


class FrameBuffer(bytearray):
    """A large frame's own buffer: ``FRAME_HEADROOM`` spare bytes, then the frame after its size field.

    Only the decoder writes the frame into it. Once the frame is handed out, the bytes in
    front of its payload (``payload_start`` of them: the spare room, the command size and
    the command, already parsed) may be overwritten, once, to put broker entry metadata in
    front of the payload without copying it (``entry.prepend_entry_metadata``).
    """

    __slots__ = ("payload_start",)
    payload_start: int


class FrameTooLarge(ProtocolError):
    """A frame's size field is over the decoder's limit."""


class LargeFrameAdmission(Protocol):
    """Who decides whether a large frame may take a buffer of its own size now (the broker's budget)."""

    def admit_large_frame(self, size: int) -> bool:
        """True: go on. False: not now; the frame waits, and asking again later may succeed.
        May raise ProtocolError to refuse the frame for good."""
        ...

    def release_large_frame(self, size: int) -> None:
        """The admitted frame was handed out (its memory is the frame's now) or dropped."""
        ...


class FrameDecoder:
    """Incremental frame decoder: put bytes in, then call ``next_frame`` until it returns None.

    Bytes go in two ways. ``feed(data)`` copies them in. ``get_buffer``/``buffer_updated``
    (the shape of ``asyncio.BufferedProtocol``) let the socket be read straight into the
    decoder: into a *shared* buffer when nothing is pending (one per event loop, so an idle
    connection holds no buffer at all), into the connection's own buffer while a frame is
    incomplete, and into a buffer of the frame's own size once more than
    ``1/LARGE_FRAME_SHARE`` of a frame of ``LARGE_FRAME`` bytes or more has come. A large
    frame's payload is then a view of that buffer (a ``FrameBuffer``), whose payload bytes
    nothing writes to again: they are not copied on their way to storage.

    The rule for the shared buffer: after ``buffer_updated``, call ``next_frame`` until it
    returns None, or call ``keep_pending``, before the next read into the shared buffer (by
    any connection), because then the bytes not yet handed out move to the connection's own
    buffer. Frames handed out never point into the shared buffer.

    While a frame is incomplete, the connection's own buffer grows with what has come (to at
    most twice that, and ``MIN_READ_SIZE``), not with what the size field declares: a peer
    cannot make the decoder set aside memory it has not sent. A frame of ``LARGE_FRAME``
    bytes or more must be *admitted* (``admission``, asked when its size field has come)
    before the decoder buffers more of it; ``next_frame`` returns None while it is not, and
    asks again on the next call.

    Raises ProtocolError for anything that cannot be a valid frame: a size above the
    limit, a command size that does not fit, an unparsable or incomplete command.
    After an error the decoder is unusable, like the stream it came from.
    """

    def __init__(
        self,
        max_frame_size: int,
        shared: bytearray | None = None,
        admission: LargeFrameAdmission | None = None,
        hot_acks: bool = False,
        hot_messages: bool = False,
    ) -> None:
        #: The largest frame accepted (its size field's value); may change between frames.
        self.max_frame_size = max_frame_size
        self._admission = admission
        #: Size of the incomplete large frame admitted (0: none).
        self._admitted = 0
        self._shared = shared
        self._own = bytearray()
        #: The bytes not yet handed out are ``_buf[_pos:_end]``; ``_buf`` is ``_own`` or ``_shared``.
        self._buf = self._own
        self._pos = 0
        self._end = 0
        #: A large frame being received (without its size field), and how much of it has come.
        self._large: FrameBuffer | None = None
        #: Where the next byte of the large frame goes (it starts at ``FRAME_HEADROOM``).
        self._large_filled = 0
        self._broken = False
        #: Hand out the usual ACK as a ``HotAck`` (read without protobuf: ``hot_acks.py``).
        self._hot_acks = hot_acks
        #: ... and the usual MESSAGE as a ``HotMessage`` (a consumer's side).
        self._hot_messages = hot_messages

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        pending = self._end - self._pos
        if self._large is not None:
            pending += 4 + self._large_filled - FRAME_HEADROOM
        return pending

    @property
    def held(self) -> int:
        """Bytes of buffer this decoder holds for itself (the shared buffer not counted)."""
        return len(self._own) + (len(self._large) if self._large is not None else 0)

    # -- bytes in ------------------------------------------------------------------------------
    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Copy ``data`` in."""
        if self._broken:
            raise ProtocolError("decoder used after a protocol error")
        view = memoryview(data).cast("B")
        if self._large is not None:
            n = min(len(self._large) - self._large_filled, len(view))
            self._large[self._large_filled : self._large_filled + n] = view[:n]
            self._large_filled += n
            view = view[n:]
        if view:
            self.keep_pending()
            self._make_room(len(view))
            self._own[self._end : self._end + len(view)] = view
            self._end += len(view)

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next read should put its bytes (any amount up to the view's length)."""
        if self._large is not None:
            return memoryview(self._large)[self._large_filled :]
        self.keep_pending()
        if self._shared is None:
            self._make_room(OWN_READ_SIZE)
        elif self._pos == self._end:
            if self._own:
                self._own = bytearray()  # an idle connection holds no buffer
            self._buf, self._pos, self._end = self._shared, 0, 0
            return memoryview(self._shared)
        else:  # the rest of an incomplete frame (or its first share), then the shared buffer again
            self._make_room(_room(self._own, self._pos, self._end, self._budgeted))
        return memoryview(self._own)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        """The read into the view from ``get_buffer`` put ``nbytes`` bytes there."""
        if self._broken:
            raise ProtocolError("decoder used after a protocol error")
        if self._large is not None:
            self._large_filled += nbytes
        else:
            self._end += nbytes

    def keep_pending(self) -> None:
        """Move the bytes not yet handed out of the shared buffer, which the next read reuses.

        Called after the last frame of a read, and by a connection that stops taking frames
        for a while (flow control): its complete frames then wait in its own buffer, and
        ``next_frame`` returns them later, in order.
        """
        if self._buf is self._own:
            return
        buf, pos, end = self._buf, self._pos, self._end
        if pos == end:
            self._buf, self._pos, self._end = self._own, 0, 0
            return
        # Room for more of the first frame when it is incomplete (none when it is complete).
        size = end - pos + (_room(buf, pos, end, self._budgeted) if _missing(buf, pos, end) > 0 else 0)
        own = self._own if len(self._own) >= size else bytearray(size)
        own[: end - pos] = memoryview(buf)[pos:end]
        self._own = self._buf = own
        self._pos, self._end = 0, end - pos

    def _make_room(self, room: int) -> None:
        """Ensure ``room`` free bytes after ``_end`` in the own buffer (dropping handed-out bytes)."""
        own, pos, end = self._own, self._pos, self._end
        if len(own) - end >= room:
            return
        pending = end - pos
        if pos and len(own) - pending >= room:
            own[:pending] = own[pos:end]  # same length: the buffer is not resized
        else:
            grown = bytearray(max(2 * len(own), pending + room) if self._shared is None else pending + room)
            grown[:pending] = memoryview(own)[pos:end]
            self._own = own = grown
        self._buf, self._pos, self._end = own, 0, pending

    # -- frames out ----------------------------------------------------------------------------
    def next_frame(self) -> Frame | HotAck | HotMessage | None:
        """Return the next complete frame, or None when more bytes are needed (a ``HotAck``
        for the usual ACK when the decoder was made with ``hot_acks``, a ``HotMessage`` for the
        usual MESSAGE with ``hot_messages``)."""
        if self._broken:
            raise ProtocolError("decoder used after a protocol error")
        try:
            frame = self._next_frame()
        except ProtocolError:
            self._broken = True
            raise
        if frame is None:
            self.keep_pending()
        return frame

    def frames(self) -> list[Frame | HotAck | HotMessage]:
        """All complete frames buffered now."""
        out: list[Frame | HotAck | HotMessage] = []
        while (frame := self.next_frame()) is not None:
            out.append(frame)
        return out

    def _next_frame(self) -> Frame | HotAck | HotMessage | None:
        large = self._large
        if large is not None:
            if self._large_filled < len(large):
                return None
            self._large = None
            self._release_admitted()
            return _frame(memoryview(large)[FRAME_HEADROOM:], large)
        buf, pos = self._buf, self._pos
        available = self._end - pos
        if available < 4:
            return None
        (total,) = _U32.unpack_from(buf, pos)
        if total > self.max_frame_size:
            raise FrameTooLarge(f"frame of {total} bytes exceeds the limit of {self.max_frame_size}")
        if total < 4:
            raise ProtocolError(f"frame size {total} is too small to hold a command")
        if available < 4 + total:
            if available >= 8:
                _check_command_size(_U32.unpack_from(buf, pos + 4)[0], total)
            if total >= LARGE_FRAME and not self._admitted:
                if self._admission is not None and not self._admission.admit_large_frame(total):
                    return None
                self._admitted = total
            own_after = _own_buffer_after(total)
            if own_after is not None and available >= own_after:
                self._large = large = FrameBuffer(FRAME_HEADROOM + total)
                have = available - 4
                large[FRAME_HEADROOM : FRAME_HEADROOM + have] = memoryview(buf)[pos + 4 : self._end]
                self._large_filled = FRAME_HEADROOM + have
                self._buf, self._pos, self._end = self._own, 0, 0
            return None
        # One copy out of the buffer (slicing the bytearray first would be a second one); the
        # temporary view is gone before the buffer is next written to or resized.
        frame_bytes = bytes(memoryview(buf)[pos + 4 : pos + 4 + total])
        self._pos = pos + 4 + total
        if self._admitted:
            self._release_admitted()
        if self._hot_acks and frame_bytes[4:6] == _ACK_TYPE and (ack := read_ack(frame_bytes, 4)) is not None:
            return ack
        if self._hot_messages and frame_bytes[4:6] == _MESSAGE_TYPE:
            (cmd_size,) = _U32.unpack_from(frame_bytes, 0)
            if 4 + cmd_size <= total and (message := read_message(frame_bytes, 4, 4 + cmd_size)) is not None:
                return message
        return _frame(memoryview(frame_bytes))

    @property
    def _budgeted(self) -> bool:
        """The incomplete frame's memory is accounted for by an admission: it may be set aside."""
        return self._admitted > 0 and self._admission is not None

    def _release_admitted(self) -> None:
        size, self._admitted = self._admitted, 0
        if size and self._admission is not None:
            self._admission.release_large_frame(size)


def _missing(buf: bytearray, pos: int, end: int) -> int:
    """Bytes the own buffer should still take for the frame begun at ``pos``.

    Those of its size field if that is incomplete; for a large frame, those that complete
    the share after which it moves to its own buffer; else the rest of the frame.
    """
    pending = end - pos
    if pending < 4:
        return 4 - pending
    size: int = _U32.unpack_from(buf, pos)[0]
    own_after = _own_buffer_after(size)
    if own_after is not None:
        return own_after - pending
    return 4 + size - pending


def _room(buf: bytearray, pos: int, end: int, admitted: bool) -> int:
    """Free bytes the own buffer should offer the next read of the frame begun at ``pos``: what
    it still takes (``_missing``), but at most as much as has come (unless the frame was
    admitted: its memory is accounted for), and ``MIN_READ_SIZE``."""
    missing = _missing(buf, pos, end)
    return max(missing if admitted else min(missing, end - pos), MIN_READ_SIZE)


def _own_buffer_after(total: int) -> int | None:
    """How many bytes of a frame of ``total`` (its size field's value) must have come, size
    field included, before it moves to a buffer of its own: more than ``1/LARGE_FRAME_SHARE``
    of it. None for a frame under ``LARGE_FRAME``, which stays where it is read."""
    return total // LARGE_FRAME_SHARE + 1 if total >= LARGE_FRAME else None


def _check_command_size(cmd_size: int, total: int) -> None:
    if cmd_size == 0 or cmd_size > total - 4:
        raise ProtocolError(f"command size {cmd_size} does not fit in a frame of {total}")


def _frame(view: memoryview, owner: FrameBuffer | None = None) -> Frame:
    """A frame from its bytes after the total-size field: ``[command size][command][payload]``."""
    total = len(view)
    (cmd_size,) = _U32.unpack_from(view, 0)
    _check_command_size(cmd_size, total)
    if owner is not None:
        owner.payload_start = FRAME_HEADROOM + 4 + cmd_size
    command = parse_command(view[4 : 4 + cmd_size])
    payload = view[4 + cmd_size :] if 4 + cmd_size < total else None
    return Frame(command, payload)


def parse_command(data: bytes | memoryview) -> wire.BaseCommand:
    """Parse a BaseCommand, turning every decoding failure into a ProtocolError."""
    return parse_proto(wire.BaseCommand(), data, "command")


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
