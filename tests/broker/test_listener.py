"""The broker's own accept loop (listener.py) on both event loops it may run on, plain and TLS: it
serves the connections it accepts, answers one it accepts with no descriptor left, serves again
once there are, and stops accepting when closed.

No descriptor is left while ``no_descriptor_left`` runs: the soft limit is lowered in this very
process, and every number below it is taken. The client's socket is made before.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import socket
import ssl
from collections.abc import Iterator

import pytest
import uvloop

from magnetar.broker import descriptors
from magnetar.broker.listener import ListenError, listen, reserve
from magnetar.broker.refusal import Answer
from magnetar.broker.spare_descriptor import SPARE
from tests.interop.tls_certs import make_tls_files
from tests.waiting import eventually_async

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
ANSWER = Answer(b"refused\n", lambda data: data.endswith(b"\n"))


class Echo(asyncio.Protocol):
    """Sends back what it reads; closes after a line. ``open``: how many are connected."""

    open = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        Echo.open += 1

    def connection_lost(self, exc: Exception | None) -> None:
        Echo.open -= 1

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)
        if data.endswith(b"\n"):
            self.transport.close()


@contextlib.contextmanager
def no_descriptor_left() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1, hard))
    fillers: list[int] = []
    try:
        while True:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        assert exc.errno == errno.EMFILE
    try:
        yield
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def exchange(sock: socket.socket, port: int, data: bytes, tls: ssl.SSLContext | None) -> bytes:
    """Connect ``sock``, send ``data``, and read until the listener closes the connection."""
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(
        sock=sock, ssl=tls, server_hostname="127.0.0.1" if tls else None
    )
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def client_socket() -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    return sock


@pytest.mark.parametrize("tls_on", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("loop_name", list(LOOPS))
def test_a_connection_accepted_with_no_descriptor_left_is_answered(tmp_path, loop_name, tls_on):
    server_tls = client_tls = None
    if tls_on:
        files = make_tls_files(tmp_path / "certs")
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_tls.load_cert_chain(files.server_cert, files.server_key)
        client_tls = ssl.create_default_context(cafile=str(files.ca))

    async def scenario() -> None:
        listener = await listen("127.0.0.1", 0, Echo, ANSWER, "the test port", "test port", tls=server_tls)
        port = listener.port
        try:
            assert port != 0
            assert await exchange(client_socket(), port, b"hello\n", client_tls) == b"hello\n"
            refused_before = descriptors.EXHAUSTION.counts["connection"]
            late = client_socket()  # while a descriptor is free for it
            # The listener's side closed too (its descriptor free before the limit is set).
            await eventually_async(lambda: Echo.open == 0, what="the connection served closed")
            with no_descriptor_left():
                assert await exchange(late, port, b"hello\n", client_tls) == b"refused\n"
                # Taken again once the refused connection is closed, on the number it had.
                await eventually_async(lambda: SPARE.held, what="the spare taken back")
            assert descriptors.EXHAUSTION.counts["connection"] == refused_before + 1
            assert await exchange(client_socket(), port, b"again\n", client_tls) == b"again\n"
        finally:
            listener.close()
        with pytest.raises(ConnectionRefusedError):
            await exchange(client_socket(), port, b"closed\n", client_tls)

    loop = LOOPS[loop_name]()
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 30))
    finally:
        loop.close()


def test_a_port_in_use_is_a_listen_error_naming_the_setting():
    async def main() -> None:
        names = ("the test port", "test port (--test-port)")
        taken = await listen("127.0.0.1", 0, Echo, ANSWER, *names)
        port = taken.port
        try:
            with pytest.raises(ListenError) as refused:
                await listen("127.0.0.1", port, Echo, ANSWER, *names)
        finally:
            taken.close()
        assert str(refused.value) == (
            f"cannot listen on 127.0.0.1:{port}, the test port (--test-port): Address already in use"
            " (another broker or program listens there)"
        )

    asyncio.run(main())


def test_listeners_with_reuse_port_share_one_port_and_both_serve():
    """SO_REUSEPORT, as broker workers use it: a second listener binds the first one's port, the
    kernel spreads connections over both, and a listener without the option is refused the port."""
    served: list[str] = []

    def counting(name: str):
        class Counted(Echo):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(transport)
                served.append(name)

        return Counted

    async def scenario() -> None:
        first = await listen("127.0.0.1", 0, counting("first"), ANSWER, "one", "port one", reuse_port=True)
        second = await listen(
            "127.0.0.1", first.port, counting("second"), ANSWER, "two", "port two", reuse_port=True
        )
        try:
            with pytest.raises(ListenError, match="Address already in use"):
                await listen("127.0.0.1", first.port, Echo, ANSWER, "three", "port three")
            for i in range(64):
                assert await exchange(client_socket(), first.port, b"%d\n" % i, None) == b"%d\n" % i
            assert set(served) == {"first", "second"} and len(served) == 64
        finally:
            first.close()
            second.close()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 30))
    finally:
        loop.close()


def test_a_reserved_port_is_kept_for_reuse_port_listeners_and_refused_to_others():
    """A supervisor's reservation (``reserve``): port 0 is picked, the port is held while no worker
    listens (bound, not listening: a connection is refused, never left waiting), workers listen on
    it with SO_REUSEPORT, and a listener without the option, or a second reservation, is refused."""

    async def scenario() -> None:
        reserved = reserve("127.0.0.1", 0, "port one")
        port = reserved[0].getsockname()[1]
        try:
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
            worker = await listen("127.0.0.1", port, Echo, ANSWER, "worker", "port one", reuse_port=True)
            try:
                assert await exchange(client_socket(), port, b"hi\n", None) == b"hi\n"
                with pytest.raises(ListenError, match="Address already in use"):
                    await listen("127.0.0.1", port, Echo, ANSWER, "other", "port two")
                with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{port}, the port three"):
                    reserve("127.0.0.1", port, "port three")
            finally:
                worker.close()
        finally:
            for sock in reserved:
                sock.close()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 30))
    finally:
        loop.close()
