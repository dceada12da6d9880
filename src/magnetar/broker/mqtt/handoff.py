"""MQTT on every worker (``--workers N``): each client id's session lives at one home worker, and
a connection that lands on another is handed there, socket and all.

The kernel spreads new connections to the MQTT port over the workers (SO_REUSEPORT), but a
session is one process's state (its takeover, its packet identifiers in flight, its QoS 2
records, its Will Delay timer), so each client id has a home: worker ``crc32(client id) % N``,
fixed while the broker runs (a worker that dies is started again under its index). The worker a
connection lands on reads up to its CONNECT; if the client id's home is another worker, it passes
the connection's socket to the home (``SCM_RIGHTS`` over a Unix datagram socket of the home's
own, in Linux's abstract namespace, named after the data directory and the worker's index) with
the bytes read so far, and forgets it: the home serves it as if it had accepted it, from its
first byte, and nothing stands between the client and its home afterwards. A home that cannot be
reached (it is restarting) costs that CONNECT a CONNACK Server unavailable; the client connects
again. An empty client id gets an assigned one whose home is the worker it landed on.
"""

from __future__ import annotations

import array
import asyncio
import hashlib
import logging
import os
import socket
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection

log = logging.getLogger(__name__)

#: The most bytes read up to a CONNECT that a handover carries (one datagram; a CONNECT is far
#: smaller): a client that sent more gets CONNACK Server unavailable.
MAX_HANDED_BYTES = 60 * 1024


def home_of(client_id: str, workers: int) -> int:
    """The index of the worker that keeps ``client_id``'s session."""
    return zlib.crc32(client_id.encode("utf-8", "surrogatepass")) % workers


def address(data_dir: Path, index: int) -> bytes:
    """Worker ``index``'s handover socket (Linux's abstract namespace: no file, no path limit)."""
    digest = hashlib.sha1(str(Path(data_dir).resolve()).encode()).hexdigest()[:20]  # a name, not a secret
    return f"\0magnetar-mqtt-{digest}-{index}".encode()


class Handoff:
    """Worker ``index`` of ``workers``: ``is_home``, ``hand_over`` a connection to its home, and
    take the connections others hand over (``serve``: a new connection on a socket, with the
    bytes read from it already)."""

    def __init__(
        self,
        data_dir: Path,
        index: int,
        workers: int,
        serve: Callable[[socket.socket, bytes], Any],
    ) -> None:
        self.data_dir = data_dir
        self.index = index
        self.workers = workers
        self._serve = serve
        self._sock: socket.socket | None = None
        self._out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._out.setblocking(False)
        #: Connections handed over to another worker, and taken from one (for logs and tests).
        self.handed = 0
        self.taken = 0

    def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(address(self.data_dir, self.index))
        sock.setblocking(False)
        self._sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._received)

    def close(self) -> None:
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        self._out.close()

    def is_home(self, client_id: str) -> bool:
        return home_of(client_id, self.workers) == self.index

    def hand_over(self, cnx: MqttConnection, client_id: str, data: bytes) -> bool:
        """Pass ``cnx``'s socket and the bytes read from it to ``client_id``'s home; False when
        that cannot be done (the home is not there, too much was read)."""
        transport = cnx.transport
        if transport is None or len(data) > MAX_HANDED_BYTES:
            return False
        sock = transport.get_extra_info("socket")
        if sock is None:
            return False
        fd = os.dup(sock.fileno())
        try:
            # sendmsg itself: socket.send_fds leaves its address argument unused.
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
            self._out.sendmsg([data], rights, 0, address(self.data_dir, home_of(client_id, self.workers)))
        except OSError as exc:
            log.info("%s: the home of client %r cannot take it: %s", cnx.remote, client_id, exc)
            return False
        finally:
            os.close(fd)  # the home has its own copy now
        self.handed += 1
        return True

    def _received(self) -> None:
        assert self._sock is not None
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self._sock, MAX_HANDED_BYTES + 1024, 4)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.error("the MQTT handover socket failed: %s", exc)
                return
            for fd in fds:
                try:
                    sock = socket.socket(fileno=fd)
                    sock.setblocking(False)
                except OSError as exc:
                    log.warning("a connection handed over does not open: %s", exc)
                    os.close(fd)
                    continue
                self.taken += 1
                self._serve(sock, data)
