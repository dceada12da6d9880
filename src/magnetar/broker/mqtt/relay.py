"""A TLS connection (``mqtts_port``) whose session lives at another worker: this worker keeps
the TLS side and passes the plain MQTT bytes both ways over a local stream socket whose other
end the home worker serves as the client's connection (handoff.py).

Nothing here reads MQTT: the home does. Each side's writes hold back the other side's reads
when they pile up (asyncio's write buffer limits), and either side's end ends the other, after
what it wrote has gone, or ``DRAIN_S`` later whatever is left (a client that stopped reading
must not hold the relay for ever: the home lets such a connection go the same way). A side whose
reading is held back cannot read its end: it is looked at every ``DRAIN_S`` for a hang-up
(``poll``) meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import select
import socket
from typing import Any, cast

log = logging.getLogger(__name__)
#: How long a side that ended leaves the other to write what it has before it is aborted.
DRAIN_S = 1.0


class _Side(asyncio.Protocol):
    """One side of a relay: what it reads is written to the other."""

    def __init__(self, relay: Relay, name: str) -> None:
        self.relay = relay
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.other: _Side | None = None
        #: What came before the other side was there.
        self.pending: list[bytes] = []
        self.lost = False
        #: While its reading is held back: the next look for a hang-up.
        self._watch: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        other = self.other
        if other is None or other.transport is None:
            self.pending.append(data)
            return
        other.transport.write(data)

    def eof_received(self) -> bool | None:
        self.relay.end(self)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._unwatch()
        self.relay.end(self)

    def pause_writing(self) -> None:
        other = self.other
        if other is not None and other.transport is not None:
            other.transport.pause_reading()
            other._look_later()

    def resume_writing(self) -> None:
        other = self.other
        if other is not None and other.transport is not None and not other.lost:
            other._unwatch()
            other.transport.resume_reading()

    def _look_later(self) -> None:
        if self._watch is None:
            self._watch = asyncio.get_running_loop().call_later(DRAIN_S, self._look)

    def _unwatch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _look(self) -> None:
        """Its reading is held back: has its peer gone?"""
        self._watch = None
        if self.lost or self.relay.ended or self.transport is None:
            return
        if _hung_up(self.transport):
            self.relay.end(self)
        else:
            self._look_later()


class Relay:
    """The TLS connection of a client (``client``, already open) and the local socket to its
    home (``home``, connected when ``start`` has run)."""

    def __init__(self, remote: str) -> None:
        self.remote = remote
        self.client = _Side(self, "client")
        self.home = _Side(self, "home")
        self.client.other, self.home.other = self.home, self.client
        self.ended = False

    def take_client(self, transport: asyncio.BaseTransport) -> None:
        """From now on ``transport``'s bytes are relayed (its protocol becomes the relay's)."""
        transport.set_protocol(self.client)
        self.client.connection_made(transport)

    async def start(self, home: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(lambda: self.home, home)
        except Exception as exc:
            log.warning("%s: the relay to its home worker does not open: %s", self.remote, exc)
            home.close()
            self.end(self.home)
            return
        pending, self.client.pending = self.client.pending, []
        assert self.home.transport is not None
        for data in pending:
            self.home.transport.write(data)
        if self.ended:  # the client went meanwhile
            self.home.transport.close()
            asyncio.get_running_loop().call_later(DRAIN_S, _abort_unless_lost, self.home)

    def end(self, side: _Side) -> None:
        """``side`` ended: so does the other, once what it has to write has gone."""
        if self.ended:
            return
        self.ended = True
        loop = asyncio.get_running_loop()
        for one in (side.other, side):
            if one is not None and one.transport is not None and not one.transport.is_closing():
                one.transport.close()
                loop.call_later(DRAIN_S, _abort_unless_lost, one)


def _hung_up(transport: asyncio.Transport) -> bool:
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(0))


def _abort_unless_lost(side: _Side) -> None:
    if not side.lost and side.transport is not None:
        log.info(
            "%s: the %s side of a relay took nothing for %.0f s, aborting",
            side.relay.remote,
            side.name,
            DRAIN_S,
        )
        side.transport.abort()


def relay(transport: Any, remote: str, home: socket.socket) -> Relay:
    """Relay ``transport`` (a client's TLS connection) to ``home`` (the local socket handed to
    its home worker)."""
    made = Relay(remote)
    made.take_client(transport)
    task = asyncio.ensure_future(made.start(home))
    _starting.add(task)
    task.add_done_callback(_starting.discard)
    return made


#: Relays being connected (a task is kept until it is done).
_starting: set[asyncio.Future[None]] = set()
