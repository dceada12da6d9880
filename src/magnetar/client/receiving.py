"""The socket's side of a client connection: bytes read straight into the frame decoder.

A ``StreamReader`` copied each read several times (into its buffer, out as ``bytes``, into the
decoder) before the frame and its payload were copied again. ``ReceiveProtocol`` is an
``asyncio.BufferedProtocol`` (TLS transports support it too): after the handshake the socket is
read into ``FrameDecoder.get_buffer`` -- a buffer shared by the event loop's connections, or a
large frame's own buffer, whose payload is then handed out as a view of it, uncopied. During
the handshake it acts as a small stream (``read``), so that the first bytes can be looked at
(an HTTP answer) before anything is decoded. It also does the writer's flow control (``drain``).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import cast

from magnetar.protocol.frames import FrameDecoder

#: Size of the read buffer the connections of one event loop share. Each read is a turn of the
#: event loop, which costs more than copying the complete frames out of a large read: for 100 KB
#: messages the read path's CPU time went 1.9 s -> 1.6 s -> 1.35 s per 2 GB with 256 KB, 1 MiB
#: and 2 MiB (the broker's 256 KB serves many connections; here one or a few are busy).
CLIENT_SHARED_READ_SIZE = 2 * 1024 * 1024
#: Room a read gets before ``start`` (the handshake: CONNECTED and what may follow it).
HANDSHAKE_READ_SIZE = 64 * 1024

_shared_buffers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, bytearray] = weakref.WeakKeyDictionary()


def shared_read_buffer(loop: asyncio.AbstractEventLoop) -> bytearray:
    """The read buffer the connections of ``loop`` share (each read's frames are handed out, or
    moved to the connection's own buffer, before the loop runs another read)."""
    buffer = _shared_buffers.get(loop)
    if buffer is None:
        buffer = _shared_buffers[loop] = bytearray(CLIENT_SHARED_READ_SIZE)
    return buffer


class ReceiveProtocol(asyncio.BufferedProtocol):
    """Reads for one connection: into a scratch buffer for ``read`` until ``start``, then into the
    decoder, calling ``on_data`` after each read (it must take every complete frame out)."""

    def __init__(self, decoder: FrameDecoder) -> None:
        self.decoder = decoder
        self.transport: asyncio.Transport | None = None
        self._scratch = bytearray(HANDSHAKE_READ_SIZE)
        self._chunks: list[bytes] = []
        self._waiter: asyncio.Future[None] | None = None
        self._on_data: Callable[[], None] | None = None
        self._on_lost: Callable[[BaseException | None], None] | None = None
        #: Set once the connection is lost (``_lost_reason`` then says why; None: a clean end).
        self._lost = False
        self._lost_reason: BaseException | None = None
        #: Set when the connection stops taking bytes: later reads go to the scratch buffer.
        self._done = False
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    # --- asyncio's callbacks ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream protocol is handed a Transport (BaseTransport is the signature all protocols share).
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._on_data is None or self._done:
            return memoryview(self._scratch)
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self._done:
            return
        if self._on_data is None:
            self._chunks.append(bytes(memoryview(self._scratch)[:nbytes]))
            self._wake()
            return
        self.decoder.buffer_updated(nbytes)
        self._on_data()

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost, self._lost_reason = True, exc
        self._wake()
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("Connection lost"))
        if self._on_lost is not None and not self._done:
            self._done = True
            self._on_lost(exc)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # --- the connection's side --------------------------------------------------------------------
    async def read(self) -> bytes:
        """Before ``start``: the bytes received since the last call (waiting for some), b"" once
        the peer closed; raises what ended the connection if it failed."""
        while not self._chunks:
            if self._lost:
                if self._lost_reason is not None:
                    raise self._lost_reason
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data

    def start(self, on_data: Callable[[], None], on_lost: Callable[[BaseException | None], None]) -> None:
        """From now on read into the decoder. What came after the last ``read`` is fed to it,
        and ``on_data`` is called soon to take out the frames it holds (then ``on_lost`` if the
        connection went meanwhile)."""
        for chunk in self._chunks:
            self.decoder.feed(chunk)
        self._chunks.clear()
        self._scratch = bytearray(1024)  # only for reads after ``stop``
        self._on_data, self._on_lost = on_data, on_lost
        loop = asyncio.get_running_loop()
        loop.call_soon(self._replay)

    def _replay(self) -> None:
        if self._done:
            return
        assert self._on_data is not None and self._on_lost is not None
        self._on_data()
        if self._lost and not self._done:
            self._done = True
            self._on_lost(self._lost_reason)

    def stop(self) -> None:
        """Take no more bytes and report nothing more (the connection is closing)."""
        self._done = True

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark; raises
        ConnectionResetError once the connection is lost."""
        if self._lost:
            raise ConnectionResetError("Connection lost")
        if not self._paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
