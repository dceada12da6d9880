"""An ``asyncio.Transport`` that is no socket: it carries the frames of a ``ServerCnx`` served
in-process, for a WebSocket session or a REST produce request (``session.py``).

The broker's connection does not know the difference: it reads through ``get_buffer`` /
``buffer_updated`` what the session hands it, writes its answers here, stops reading
(``pause_reading``) when its flow control says so, and closes. What it writes goes to the
session's frame decoder; the session is told on the next loop turn, as with bytes off a socket,
so the connection is never re-entered from inside its own write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class LocalTransport(asyncio.Transport):
    """Bytes from the session go in with ``push``; bytes the connection writes go to ``deliver``.

    ``extra``: what ``get_extra_info`` answers (the HTTP client's ``peername``, and over HTTPS its
    ``sslcontext`` and ``peercert``, so the broker sees the WebSocket client as its peer: its
    address in stats and limits, its certificate for the ``tls`` provider).
    """

    def __init__(
        self,
        protocol: asyncio.BufferedProtocol,
        deliver: Callable[[list[bytes | memoryview]], None],
        lost: Callable[[], None],
        extra: dict[str, Any],
    ) -> None:
        super().__init__(extra)
        self._protocol = protocol
        self._deliver = deliver
        self._lost = lost
        self._extra = extra
        self._closing = False
        self._paused = False
        #: Bytes for the connection that wait while it is not read (its flow control holds it).
        self._held: list[bytes] = []
        self._release_scheduled = False
        self._loop = asyncio.get_running_loop()
        #: Set while the connection takes bytes; the session waits on it before taking more from
        #: its own client (so the WebSocket client is held back as a TCP peer would be).
        self.readable = asyncio.Event()
        self.readable.set()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    # -- the connection's side ----------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writelines([bytes(data)])

    def writelines(self, list_of_data: Any) -> None:
        if not self._closing:
            self._deliver(list(list_of_data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """The connection closes (or the session does): it hears ``connection_lost`` next turn."""
        if self._closing:
            return
        self._closing = True
        self._held.clear()
        self.readable.set()  # nobody waits for a connection that is gone
        self._loop.call_soon(self._protocol.connection_lost, None)
        self._loop.call_soon(self._lost)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self._paused = True
        self.readable.clear()

    def resume_reading(self) -> None:
        if not self._paused:
            return
        self._paused = False
        if not self._release_scheduled:
            self._release_scheduled = True
            self._loop.call_soon(self._release)

    def is_reading(self) -> bool:
        return not self._paused

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    # -- the session's side -------------------------------------------------------------------
    def push(self, data: bytes) -> None:
        """Hand ``data`` (whole frames) to the connection at the end of this loop turn, with
        whatever else the session sends in it (or once the connection reads again): the
        connection then reads them as one read off a socket, in one pass (one SEND after another
        becomes one storage write of many entries, as from a client that pipelines)."""
        if self._closing:
            return
        self._held.append(data)
        if not self._paused and not self._release_scheduled:
            self._release_scheduled = True
            self._loop.call_soon(self._release)

    def _feed(self, view: memoryview) -> None:
        protocol = self._protocol
        while view and not self._closing:
            if self._paused:
                self._held.insert(0, bytes(view))
                return
            buffer = memoryview(protocol.get_buffer(len(view)))
            n = min(len(buffer), len(view))
            buffer[:n] = view[:n]
            view = view[n:]
            protocol.buffer_updated(n)

    def flush(self) -> None:
        """Hand the connection what is pushed now rather than at the end of the turn (the session
        is closing: what it sent last, its final acks, must arrive before the close)."""
        if not self._paused and not self._closing:
            self._release()

    def _release(self) -> None:
        self._release_scheduled = False
        while self._held and not self._paused and not self._closing:
            held, self._held = self._held, []
            self._feed(memoryview(b"".join(held) if len(held) > 1 else held[0]))
        if not self._paused and not self._closing:
            self.readable.set()
