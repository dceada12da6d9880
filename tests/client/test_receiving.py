"""The connection's receive path (``receiving.ReceiveProtocol``) against scripted servers: frames
sent with CONNECTED, frames of every size on two connections that share the loop's read
buffer, large payloads handed over uncopied, and the writer's flow control."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client.connection import Connection
from magnetar.client.errors import ConnectionClosed
from magnetar.protocol import FrameDecoder, commands, encode_frame, wire
from magnetar.protocol.frames import FrameBuffer
from tests.waiting import eventually_async

T = wire.BaseCommand


class Handler:
    """A consumer handler that keeps what it is given."""

    def __init__(self) -> None:
        self.payloads: list[memoryview] = []
        self.entries: list[int] = []
        self.closed = False

    def on_message(self, cnx, message, payload) -> None:
        self.entries.append(message.message_id.entry_id)
        self.payloads.append(payload)

    def on_close_by_broker(self, cnx) -> None: ...
    def on_active_consumer_change(self, cnx, is_active) -> None: ...
    def on_reached_end_of_topic(self, cnx) -> None: ...

    def on_connection_closed(self, cnx) -> None:
        self.closed = True


def message_frame(entry: int, payload: bytes) -> bytes:
    body = wire.CommandMessage(consumer_id=1, message_id=wire.MessageIdData(ledger_id=1, entry_id=entry))
    return encode_frame(commands.wrap(body), payload)


def payload_of(entry: int, size: int) -> bytes:
    return (b"%d:" % entry + bytes(range(256)) * (size // 256 + 1))[:size]


#: 100 B, 100 KB and 3 MB payloads (a 3 MB frame never fits one read of the shared buffer).
SIZES = [100, 100_000, 100, 3_000_000, 300, 100_000, 100_000, 50, 3_000_000, 100]


class StreamingServer:
    """Answers CONNECT with CONNECTED and ``with_connected`` in the same write, then, once
    ``go`` is set, writes ``stream`` in ``chunk``-byte pieces."""

    def __init__(self, stream: bytes = b"", with_connected: bytes = b"", chunk: int = 7001) -> None:
        self.stream, self.with_connected, self.chunk = stream, with_connected, chunk
        self.go = asyncio.Event()
        self.writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> StreamingServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info) -> None:
        for writer in self.writers:
            writer.close()
        self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        decoder = FrameDecoder(1 << 24)
        while not decoder.frames():
            decoder.feed(await reader.read(65536))
        connected = wire.CommandConnected(server_version="s", protocol_version=20)
        writer.write(encode_frame(commands.wrap(connected)) + self.with_connected)
        await self.go.wait()
        for start in range(0, len(self.stream), self.chunk):
            writer.write(self.stream[start : start + self.chunk])
            await writer.drain()
        await reader.read()  # until the client closes


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_frames_that_come_with_connected_are_dispatched_in_order():
    async def main():
        first = b"".join(message_frame(i, payload_of(i, 100 * (i + 1))) for i in range(3))
        async with StreamingServer(with_connected=first) as server:
            cnx = await Connection.open("127.0.0.1", server.port)
            handler = Handler()
            cnx.register_consumer(1, handler)
            await eventually_async(lambda: len(handler.entries) == 3)
            assert handler.entries == [0, 1, 2]
            assert [bytes(p) for p in handler.payloads] == [payload_of(i, 100 * (i + 1)) for i in range(3)]
            await cnx.close()

    run(main())


@pytest.mark.parametrize("chunk", [7001, 1 << 20])
def test_two_connections_sharing_the_loop_buffer_get_every_frame_whole(chunk):
    async def main():
        streams = [
            b"".join(message_frame(i, payload_of(i + 100 * n, size)) for i, size in enumerate(sizes))
            for n, sizes in enumerate([SIZES, SIZES[::-1]])
        ]
        async with (
            StreamingServer(streams[0], chunk=chunk) as one,
            StreamingServer(streams[1], chunk=chunk) as two,
        ):
            cnxs = [await Connection.open("127.0.0.1", s.port) for s in (one, two)]
            handlers = [Handler(), Handler()]
            for cnx, handler in zip(cnxs, handlers, strict=True):
                cnx.register_consumer(1, handler)
            one.go.set()
            two.go.set()
            await eventually_async(lambda: all(len(h.entries) == len(SIZES) for h in handlers), timeout=15)
            for n, (handler, sizes) in enumerate(zip(handlers, [SIZES, SIZES[::-1]], strict=True)):
                assert handler.entries == list(range(len(sizes)))
                assert [bytes(p) for p in handler.payloads] == [
                    payload_of(i + 100 * n, size) for i, size in enumerate(sizes)
                ]
                # a 3 MB frame spans reads: it is read into a buffer of its own, its payload a view of it
                large = [p for p, size in zip(handler.payloads, sizes, strict=True) if size == 3_000_000]
                assert large and all(isinstance(p.obj, FrameBuffer) for p in large)
            for cnx in cnxs:
                await cnx.close()

    run(main())


def test_drain_waits_while_the_peer_does_not_read_and_fails_when_it_goes():
    async def main():
        stalled = asyncio.Event()
        writers: list[asyncio.StreamWriter] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writers.append(writer)
            decoder = FrameDecoder(1 << 24)
            while not decoder.frames():
                decoder.feed(await reader.read(65536))
            connected = wire.CommandConnected(server_version="s", protocol_version=20)
            writer.write(encode_frame(commands.wrap(connected)))
            await stalled.wait()  # reads nothing more
            writer.transport.abort()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        try:
            cnx = await Connection.open("127.0.0.1", server.sockets[0].getsockname()[1])
            handler = Handler()
            cnx.register_consumer(1, handler)
            ping = commands.ping()
            drain = None
            for _ in range(1000):  # until the socket buffers are full and the transport pauses
                cnx.send_command(ping, b"x" * 3_000_000)
                drain = asyncio.ensure_future(cnx.drain())
                await asyncio.sleep(0)
                if not drain.done():
                    break
                await drain
            assert drain is not None and not drain.done(), "the writes never filled the socket"
            stalled.set()
            with pytest.raises(ConnectionClosed):
                await drain
            await eventually_async(lambda: cnx.is_closed and handler.closed)
        finally:
            server.close()

    run(main())
