"""The broker's listening sockets, with an accept loop of our own that still answers when no
descriptor is left.

asyncio's and uvloop's servers accept in a loop of their own: when accept() fails with EMFILE
asyncio logs and tries again a second later (the client waits, unanswered), and libuv accepts
and closes the connection (the client sees a reset). Here each connection accepted is made a
transport with ``loop.connect_accepted_socket``, as those servers do (asyncio with a task per
connection too), and served by the port's protocol factory. When accept() fails for want of
descriptors, the process's spare one (spare_descriptor.py) is closed, the connection accepted on
it and answered (refusal.py), the refusal counted and logged (``descriptors.EXHAUSTION``); the
listener waits for the spare to be taken back before it accepts again.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any

from magnetar.broker import descriptors
from magnetar.broker.refusal import ANSWER_WAIT_S, Answer, Refusal
from magnetar.broker.spare_descriptor import SPARE

log = logging.getLogger(__name__)

#: Connections accepted per wakeup at most (asyncio's server takes its backlog's worth).
ACCEPT_BATCH = 100
#: A listener that cannot accept now (no spare to answer with, ENOBUFS ...) tries again after this.
RETRY_S = 1.0
#: How long a refused TLS connection's close waits for the client's close_notify (asyncio's
#: default is 30 s, which the spare would be held for).
REFUSAL_TLS_SHUTDOWN_S = 1.0

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


async def bind(host: str, port: int, backlog: int, reuse_port: bool = False) -> list[socket.socket]:
    """Non-blocking listening sockets on the addresses ``host`` names (all of them for ``""``), as
    ``loop.create_server`` binds them; with port 0 the first picks a free port and the others take it.
    ``reuse_port``: SO_REUSEPORT, so that processes (broker workers) listen on one port together
    and the kernel spreads the connections over them."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets = _bound(host, infos, port, reuse_port)
    try:
        for sock in sockets:
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def reserve(host: str, port: int, setting: str) -> list[socket.socket]:
    """Sockets bound to ``host``:``port`` with SO_REUSEPORT but not listening: a supervisor keeps
    them so that the port (picked here for port 0) stays its workers' while they start and restart,
    and no connection waits on a socket nobody accepts on. The port must be free first (a bind
    without SO_REUSEPORT): another broker's workers must not share it. A ``ListenError`` naming
    ``setting`` if it is not."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        probes = _bound(host, infos, port, reuse_port=False)
        chosen = probes[0].getsockname()[1]
        for probe in probes:
            probe.close()
        return _bound(host, infos, chosen, reuse_port=True)
    except OSError as exc:
        raise cannot_listen(exc, host, port, setting) from exc


def _bound(host: str, infos: list[Any], port: int, reuse_port: bool) -> list[socket.socket]:
    """Sockets bound (not listening) on each address of ``infos``, at ``port`` (0: the first
    picks one and the others take it)."""
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # a family this host has no support for (IPv6 off)
                continue
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            chosen = sockets[0].getsockname()[1] if port == 0 and len(sockets) > 1 else port
            address = (address[0], chosen, *address[2:])
            try:
                sock.bind(address)
            except OSError as exc:
                raise OSError(
                    exc.errno, f"error while attempting to bind on address {address!r}: {exc.strerror}"
                ) from None
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(f"no address to listen on for {host!r}")
    return sockets


async def listen(
    host: str,
    port: int,
    serve: ProtocolFactory,
    refusal: Answer,
    name: str,
    setting: str,
    tls: ssl.SSLContext | None = None,
    handshake_timeout: float | None = None,
    backlog: int = 4096,
    reuse_port: bool = False,
) -> Listener:
    """Serve connections to ``host``:``port`` with ``serve``; ``refusal`` is what one gets when no
    descriptor is left. ``name`` says which port in the log (``the Pulsar port``); a port that
    cannot be bound is a ``ListenError`` naming ``setting`` (``binary protocol port (--port)``);
    ``reuse_port`` as ``bind``'s."""
    try:
        sockets = await bind(host, port, backlog, reuse_port)
    except OSError as exc:
        raise cannot_listen(exc, host, port, setting) from exc
    return Listener(sockets, serve, refusal, name, tls, handshake_timeout)


class ListenError(OSError):
    """A port that cannot be bound (in use, not allowed, an address that is not this host's):
    ``magnetar standalone`` prints it as one line and exits 1 (docs/cli.md), where
    ``OSError: [Errno 98] error while attempting to bind`` named neither the setting nor the flag."""


#: What a user can do about the usual causes.
_HINTS = {
    errno.EADDRINUSE: "another broker or program listens there",
    errno.EACCES: "ports below 1024 need privileges",
    errno.EADDRNOTAVAIL: "the host is not an address of this machine",
}


def cannot_listen(exc: OSError, host: str, port: int, setting: str) -> ListenError:
    """``exc``, raised binding ``host:port`` for ``setting``, as one line."""
    # The errno's own words: uvloop's message repeats the address and asyncio's is a sentence.
    reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else (exc.strerror or str(exc))
    hint = _HINTS.get(exc.errno or 0)
    message = f"cannot listen on {host}:{port}, the {setting}: {reason}" + (f" ({hint})" if hint else "")
    return ListenError(message)


class Listener:
    """Accepts on ``sockets`` until ``close``; see the module's docstring."""

    def __init__(
        self,
        sockets: list[socket.socket],
        serve: ProtocolFactory,
        refusal: Answer,
        name: str,
        tls: ssl.SSLContext | None = None,
        handshake_timeout: float | None = None,
    ) -> None:
        self.sockets = sockets
        self._serve = serve
        self._refusal = refusal
        self._name = name
        self._loop = asyncio.get_running_loop()
        self._tls: dict[str, Any] = (
            {} if tls is None else {"ssl": tls, "ssl_handshake_timeout": handshake_timeout}
        )
        # A refused connection holds the last descriptor: it is let go of soon, TLS or not.
        self._refusing_tls: dict[str, Any] = {}
        if tls is not None:
            self._refusing_tls = {
                "ssl": tls,
                "ssl_handshake_timeout": ANSWER_WAIT_S,
                "ssl_shutdown_timeout": REFUSAL_TLS_SHUTDOWN_S,
            }
        #: Connections being made (a TLS handshake can take seconds): a strong reference each, and
        #: cancelled at ``close``.
        self._making: set[asyncio.Task[Any]] = set()
        self._retry: asyncio.TimerHandle | None = None
        self._accepting = False
        self._closed = False
        SPARE.hold()
        self._accept()

    @property
    def port(self) -> int:
        """The port as bound (the one picked, for port 0)."""
        return int(self.sockets[0].getsockname()[1])

    def close(self) -> None:
        """Stop accepting and close the sockets; connections still being made are dropped."""
        self._closed = True
        self._pause()
        for sock in self.sockets:
            sock.close()
        for task in list(self._making):
            task.cancel()

    # -- accepting ------------------------------------------------------------------------------
    def _accept(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._closed or self._accepting:
            return
        SPARE.hold()  # if it went missing, now that a descriptor may be free
        self._accepting = True
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._readable, sock)

    def _pause(self) -> None:
        if self._accepting:
            self._accepting = False
            for sock in self.sockets:
                self._loop.remove_reader(sock.fileno())

    def _wait(self) -> None:
        """Stop accepting until the spare is back, or ``RETRY_S`` from now."""
        self._pause()
        if not self._closed:
            self._retry = self._loop.call_later(RETRY_S, self._accept)
            SPARE.when_back(self._accept)

    def _readable(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # the client left before it was accepted
                continue
            except OSError as exc:
                self._cannot_accept(sock, exc)
                return
            self._make(conn, self._serve, self._tls)

    def _make(self, conn: socket.socket, protocol: ProtocolFactory, tls: dict[str, Any]) -> asyncio.Task[Any]:
        task = self._loop.create_task(self._loop.connect_accepted_socket(protocol, conn, **tls))
        self._making.add(task)
        task.add_done_callback(self._made)
        return task

    def _made(self, task: asyncio.Task[Any]) -> None:
        self._making.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # A failed TLS handshake, a client gone meanwhile: its socket is closed already.
            log.debug("%s: a connection could not be made: %r", self._name, exc)

    def _cannot_accept(self, sock: socket.socket, exc: OSError) -> None:
        if not descriptors.is_exhaustion(exc):
            log.warning(
                "%s: cannot accept connections (%s); trying again in %.0f s", self._name, exc, RETRY_S
            )
        elif SPARE.lend():
            try:
                conn, peer = sock.accept()
            except OSError as again:
                SPARE.give_back()
                if isinstance(again, BlockingIOError):
                    return  # the client left meanwhile
            else:
                self._refuse(conn, peer)
        self._wait()

    def _refuse(self, conn: socket.socket, peer: Any) -> None:
        """Answer ``conn``, accepted on the spare's descriptor, and give the spare back once it is closed."""
        descriptors.EXHAUSTION.refused("connection", f"{peer[0]}:{peer[1]} on {self._name}")
        returned = _once(SPARE.give_back)
        task = self._make(conn, lambda: Refusal(self._refusal, returned), self._refusing_tls)

        def not_made(task: asyncio.Task[Any]) -> None:
            if task.cancelled() or task.exception() is not None:  # no connection_lost then
                self._loop.call_soon(returned)

        task.add_done_callback(not_made)


def _once(action: Callable[[], None]) -> Callable[[], None]:
    done = False

    def once() -> None:
        nonlocal done
        if not done:
            done = True
            action()

    return once
