"""The handover of a relayed TLS connection (broker/mqtt/handoff.py): the client's address and
certificate reach the home worker only under the workers' seal, and a relay's bytes go both ways
(relay.py), over real local sockets."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from magnetar.broker.authentication import AuthenticationFailed
from magnetar.broker.mqtt import relay
from magnetar.broker.mqtt.handoff import RELAYED, TlsPeer, read_relay_header, relay_header
from magnetar.broker.worker_credentials import WorkerSecret

from ..waiting import eventually_async

CERT = {"subject": [[["commonName", "car-7"]]]}


def test_a_relay_header_carries_the_peer_and_the_bytes_read(tmp_path):
    secret = WorkerSecret(tmp_path)
    peer = TlsPeer("10.0.0.7:5123", CERT)
    datagram = relay_header(secret, peer) + b"CONNECT bytes"
    assert read_relay_header(secret, datagram) == (peer, b"CONNECT bytes")
    assert peer.address == "10.0.0.7"
    assert TlsPeer("::1:80", None).address == "::1"


def test_a_header_not_sealed_by_this_data_directory_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ours, theirs = WorkerSecret(tmp_path / "a"), WorkerSecret(tmp_path / "b")
    datagram = relay_header(theirs, TlsPeer("1.2.3.4:1", CERT))
    with pytest.raises(AuthenticationFailed):
        read_relay_header(ours, datagram)


def test_a_forged_certificate_beside_a_valid_seal_is_not_taken(tmp_path):
    """The certificate taken is the sealed one, not one written beside it."""
    secret = WorkerSecret(tmp_path)
    datagram = relay_header(secret, TlsPeer("1.2.3.4:1", None))
    size = int.from_bytes(datagram[1:5], "big")
    fields = json.loads(datagram[5 : 5 + size])
    fields["certificate"] = CERT
    body = json.dumps(fields).encode()
    forged = RELAYED + len(body).to_bytes(4, "big") + body
    peer, _ = read_relay_header(secret, forged)
    assert peer.certificate is None


def test_a_relay_passes_bytes_both_ways_and_ends_both_sides():
    async def run() -> None:
        loop = asyncio.get_running_loop()
        client_end, broker_end = socket.socketpair()
        home_end, relay_end = socket.socketpair()
        for end in (client_end, home_end):
            end.setblocking(False)
        accepted: asyncio.Future[asyncio.Transport] = loop.create_future()

        class Accepting(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                accepted.set_result(transport)  # type: ignore[arg-type]

        await loop.connect_accepted_socket(Accepting, broker_end)
        made = relay.relay(await accepted, "client:1", relay_end)
        await loop.sock_sendall(client_end, b"to the home")
        assert await loop.sock_recv(home_end, 100) == b"to the home"
        await loop.sock_sendall(home_end, b"to the client" * 10_000)
        got = b""
        while len(got) < 130_000:
            got += await loop.sock_recv(client_end, 65536)
        assert got == b"to the client" * 10_000
        home_end.close()  # the home ends the connection: the client's side ends too
        assert await loop.sock_recv(client_end, 100) == b""
        assert made.ended
        client_end.close()

    asyncio.run(run())


def test_a_client_that_stopped_reading_does_not_hold_the_relay(monkeypatch):
    """The home ended the connection while the client reads nothing: what is left for the
    client is dropped after ``DRAIN_S`` and its side closed."""
    monkeypatch.setattr(relay, "DRAIN_S", 0.1)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        client_end, broker_end = socket.socketpair()
        home_end, relay_end = socket.socketpair()
        home_end.setblocking(False)
        accepted: asyncio.Future[asyncio.Transport] = loop.create_future()

        class Accepting(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                accepted.set_result(transport)  # type: ignore[arg-type]

        await loop.connect_accepted_socket(Accepting, broker_end)
        made = relay.relay(await accepted, "client:2", relay_end)
        flood = b"x" * (8 << 20)  # more than the sockets hold: the client reads nothing
        sent = loop.create_task(loop.sock_sendall(home_end, flood))
        client = made.client.transport
        assert client is not None
        await eventually_async(client.get_write_buffer_size, what="the client's side backed up")
        sent.cancel()
        home_end.close()
        await eventually_async(lambda: made.client.lost, what="the client's side let go")
        assert made.ended
        client_end.close()

    asyncio.run(run())
