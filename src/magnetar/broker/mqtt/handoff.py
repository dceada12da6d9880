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
again. A home whose queue of handovers is full (a burst of CONNECTs: Linux queues 10 unread
datagrams) is tried again every few milliseconds, the connection unread meanwhile, for up to 2 s.
An empty client id gets an assigned one whose home is the worker it landed on.

A TLS connection (``mqtts_port``) cannot be handed over: its keys are in the accepting process's
TLS state. The worker it landed on keeps the TLS side and relays the plain MQTT bytes (relay.py)
over a local stream socket whose other end it hands to the home instead, with what the TLS
handshake proved (the verified client certificate) and the client's address, sealed with the
workers' secret (worker_credentials.py): the abstract namespace is open to any local process, so
the home takes a TLS identity only with a valid seal.

A datagram is one kind byte, then: ``H`` the bytes read (the socket is the client's own); ``R``
a 4-byte length, that many bytes of JSON (``remote``, ``seal``), the bytes read (the socket is
the local end of a relay).
"""

from __future__ import annotations

import array
import asyncio
import hashlib
import json
import logging
import os
import socket
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.broker.authentication import AuthenticationFailed
from magnetar.broker.worker_credentials import Relayed, WorkerSecret

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection

log = logging.getLogger(__name__)

#: The most bytes read up to a CONNECT that a handover carries (one datagram; a CONNECT is far
#: smaller): a client that sent more gets CONNACK Server unavailable.
MAX_HANDED_BYTES = 60 * 1024
#: The largest handover datagram: the bytes read, and a relay's header (a certificate's fields).
MAX_DATAGRAM = MAX_HANDED_BYTES + 32 * 1024
#: A home whose queue of handovers is full (Linux holds ``net.unix.max_dgram_qlen``, 10 by
#: default, unread datagrams per socket: a burst of CONNECTs fills it in a moment) is tried
#: again this often, for at most this long, before the CONNECT gets Server unavailable.
HOME_FULL_RETRY_S = 0.005
HOME_FULL_PATIENCE_S = 2.0
#: The kinds of handover: the client's own socket, or the local end of a TLS relay.
HANDED = b"H"
RELAYED = b"R"


@dataclass(frozen=True, slots=True)
class TlsPeer:
    """What the worker that terminates a relayed TLS connection proved: the client's address
    (``host:port``) and its verified certificate (``getpeercert()``'s fields), if any."""

    remote: str
    certificate: dict[str, Any] | None

    @property
    def address(self) -> str:
        return self.remote.rpartition(":")[0] or self.remote


def relay_header(secret: WorkerSecret, peer: TlsPeer) -> bytes:
    """The sealed header of a relay's handover."""
    sealed = secret.seal(Relayed("tls", b"", peer.certificate)).decode()
    body = json.dumps({"remote": peer.remote, "seal": sealed}, separators=(",", ":")).encode()
    return RELAYED + len(body).to_bytes(4, "big") + body


def read_relay_header(secret: WorkerSecret, datagram: bytes) -> tuple[TlsPeer, bytes]:
    """The peer a relay's header names and the bytes after it; AuthenticationFailed (or
    ValueError) when it is not one a worker of this data directory sealed."""
    size = int.from_bytes(datagram[1:5], "big")
    if len(datagram) < 5 + size:
        raise ValueError("a relay header cut short")
    fields = json.loads(datagram[5 : 5 + size])
    relayed = secret.open(str(fields["seal"]).encode())
    if relayed.method != "tls":
        raise AuthenticationFailed("a relay seals a TLS identity")
    return TlsPeer(str(fields["remote"]), relayed.certificate), datagram[5 + size :]


def home_of(client_id: str, workers: int) -> int:
    """The index of the worker that keeps ``client_id``'s session."""
    return zlib.crc32(client_id.encode("utf-8", "surrogatepass")) % workers


def address(data_dir: Path, index: int) -> bytes:
    """Worker ``index``'s handover socket (Linux's abstract namespace: no file, no path limit)."""
    digest = hashlib.sha1(str(Path(data_dir).resolve()).encode()).hexdigest()[:20]  # a name, not a secret
    return f"\0magnetar-mqtt-{digest}-{index}".encode()


class HomeFull(Exception):
    """The home's queue of handovers is full for now: the connection is handed over a moment later."""


class Handoff:
    """Worker ``index`` of ``workers``: ``is_home``, ``hand_over`` a connection to its home, and
    take the connections others hand over (``serve``: a new connection on a socket, with the
    bytes read from it already)."""

    def __init__(
        self,
        data_dir: Path,
        index: int,
        workers: int,
        serve: Callable[[socket.socket, bytes, TlsPeer | None], Any],
        secret: WorkerSecret | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.index = index
        self.workers = workers
        self._serve = serve
        #: The workers' secret, which seals a relayed TLS identity.
        self.secret = secret
        self._sock: socket.socket | None = None
        self._out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._out.setblocking(False)
        #: Connections handed over to another worker, and taken from one (for logs and tests).
        self.handed = 0
        self.taken = 0
        #: TLS connections relayed to their home, and relays taken from another worker.
        self.relayed = 0
        self.relays_taken = 0

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
        that cannot be done (the home is not there, too much was read); HomeFull when the home's
        queue is full for now."""
        transport = cnx.transport
        if transport is None or len(data) > MAX_HANDED_BYTES:
            return False
        sock = transport.get_extra_info("socket")
        if sock is None:
            return False
        if self._send(HANDED + data, sock.fileno(), client_id, cnx.remote):
            self.handed += 1
            return True
        return False

    def relay_to_home(self, client_id: str, peer: TlsPeer, data: bytes) -> socket.socket | None:
        """Hand the home of ``client_id`` one end of a new local stream socket, with ``peer``
        sealed and the bytes read so far; the other end, for this worker to relay the TLS
        connection's bytes through (relay.py), or None when that cannot be done; HomeFull when
        the home's queue is full for now."""
        if self.secret is None or len(data) > MAX_HANDED_BYTES:
            return None
        try:
            header = relay_header(self.secret, peer)
            if len(header) + len(data) > MAX_DATAGRAM:
                raise OSError(f"a handover of {len(header) + len(data)} bytes")
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        except (OSError, AuthenticationFailed) as exc:
            log.warning("%s: no relay to the home of client %r: %s", peer.remote, client_id, exc)
            return None
        try:
            sent = self._send(header + data, theirs.fileno(), client_id, peer.remote)
        except HomeFull:
            mine.close()
            raise
        finally:
            theirs.close()  # the home has its own copy now
        if not sent:
            mine.close()
            return None
        self.relayed += 1
        return mine

    def _send(self, datagram: bytes, fileno: int, client_id: str, remote: str) -> bool:
        fd = os.dup(fileno)
        try:
            # sendmsg itself: socket.send_fds leaves its address argument unused.
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
            self._out.sendmsg([datagram], rights, 0, address(self.data_dir, home_of(client_id, self.workers)))
        except BlockingIOError:
            raise HomeFull(client_id) from None
        except OSError as exc:
            log.info("%s: the home of client %r cannot take it: %s", remote, client_id, exc)
            return False
        finally:
            os.close(fd)  # the home has its own copy now
        return True

    def _received(self) -> None:
        assert self._sock is not None
        while True:
            try:
                datagram, fds, _, _ = socket.recv_fds(self._sock, MAX_DATAGRAM, 4)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.error("the MQTT handover socket failed: %s", exc)
                return
            try:
                data, peer = self._unpack(datagram)
            except (ValueError, KeyError, TypeError, AuthenticationFailed) as exc:
                log.warning("a handover that is not a worker's is refused: %s", exc)
                for fd in fds:
                    os.close(fd)
                continue
            for fd in fds:
                try:
                    sock = socket.socket(fileno=fd)
                    sock.setblocking(False)
                except OSError as exc:
                    log.warning("a connection handed over does not open: %s", exc)
                    os.close(fd)
                    continue
                if peer is None:
                    self.taken += 1
                else:
                    self.relays_taken += 1
                self._serve(sock, data, peer)

    def _unpack(self, datagram: bytes) -> tuple[bytes, TlsPeer | None]:
        kind = datagram[:1]
        if kind == HANDED:
            return datagram[1:], None
        if kind == RELAYED and self.secret is not None:
            peer, data = read_relay_header(self.secret, datagram)
            return data, peer
        raise ValueError(f"a handover of kind {kind!r}")
